package providersim

import (
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"
)

var (
	createRefundSpec = spec{
		scalars: set("payment_intent", "charge", "amount", "reason"),
		hashes:  map[string]map[string]bool{"metadata": nil},
		arrays:  set("expand"),
	}
	listRefundsSpec = spec{
		scalars: set("payment_intent", "charge", "created", "limit", "starting_after", "ending_before"),
		hashes:  map[string]map[string]bool{"created": set("gt", "gte", "lt", "lte")},
		arrays:  set("expand"),
	}
	retrieveRefundSpec = spec{arrays: set("expand")}
)

// refundInput is a validated POST /v1/refunds.
type refundInput struct {
	paymentIntent, charge string
	amount                int64 // 0: what remains
	reason                string
	metadata              map[string]string
}

// createRefund is POST /v1/refunds (https://docs.stripe.com/api/refunds/create):
// a refund of a succeeded PaymentIntent (payment_intent) or of its charge
// (charge). Refusals that depend on the charge's state
// (charge_already_refunded, amount_too_large, a PaymentIntent without a
// successful charge) come from the executing endpoint and are saved under
// the key; an unknown PaymentIntent or charge (404) is not.
func (s *Server) createRefund(w http.ResponseWriter, r *http.Request) {
	s.servePost(w, r, createRefundSpec, func(p params) (*operation, *apiError) {
		in, e := parseRefund(p)
		if e != nil {
			return nil, e
		}
		return &operation{
			check: func() *apiError { _, e := s.refundTargetLocked(in); return e },
			commit: func(string) (change, *apiError) {
				ch, e := s.refundTargetLocked(in)
				if e != nil {
					return change{}, e
				}
				return s.refundLocked(in, ch), nil
			},
		}, nil
	})
}

func parseRefund(p params) (refundInput, *apiError) {
	in := refundInput{paymentIntent: p.scalar["payment_intent"], charge: p.scalar["charge"], reason: p.scalar["reason"]}
	switch {
	case in.paymentIntent == "" && in.charge == "":
		return in, invalidParam("payment_intent", codeParameterMissing, "One of the following params should be provided for this request: payment_intent or charge.")
	case in.paymentIntent != "" && in.charge != "":
		return in, invalidParam("charge", "", "You may only specify one of these parameters: charge, payment_intent.")
	}
	amount, ok, e := p.intParam("amount")
	if e != nil {
		return in, e
	}
	if ok && amount < 1 {
		return in, invalidParam("amount", codeParameterInvalidInteger, "This value must be greater than or equal to 1.")
	}
	in.amount = amount
	if _, ok := p.scalar["reason"]; ok {
		if e := enumValue("reason", in.reason, "duplicate", "fraudulent", "requested_by_customer"); e != nil {
			return in, e
		}
	}
	if in.metadata, e = p.metadataParam(); e != nil {
		return in, e
	}
	if _, e := p.expandParam(); e != nil {
		return in, e
	}
	return in, nil
}

// refundTargetLocked finds the charge to refund: the named one, or the
// named PaymentIntent's latest charge (nil if it has none); 404
// resource_missing when the named object does not exist.
func (s *Server) refundTargetLocked(in refundInput) (*Charge, *apiError) {
	if in.charge != "" {
		ch := s.chargeByID[in.charge]
		if ch == nil {
			return nil, notFound("charge", "charge", in.charge)
		}
		return ch, nil
	}
	it := s.intentByID[in.paymentIntent]
	if it == nil {
		return nil, notFound("payment_intent", "payment_intent", in.paymentIntent)
	}
	if id, ok := it.pi.LatestCharge.(string); ok {
		return s.chargeByID[id], nil
	}
	return nil, nil
}

// refundLocked refunds in from charge ch, or refuses it (saved).
func (s *Server) refundLocked(in refundInput, ch *Charge) change {
	refuse := func(code, param, msg string) change {
		e := &apiError{status: http.StatusBadRequest, obj: ErrorObject{Type: typeInvalidRequest, Code: code, Param: param, Message: msg}}
		return change{status: e.status, body: e.body()}
	}
	if ch == nil || ch.Status != statusSucceeded {
		if in.charge != "" {
			return refuse("charge_not_refundable", "charge", "Charge "+in.charge+" has not succeeded; only a succeeded charge can be refunded.")
		}
		return refuse(codeUnexpectedState, "payment_intent", "This PaymentIntent ("+in.paymentIntent+") does not have a successful charge to refund.")
	}
	remaining := ch.Amount - ch.AmountRefunded
	amount := in.amount
	if amount == 0 {
		amount = remaining
	}
	switch {
	case remaining == 0:
		return refuse(codeChargeAlreadyRefunded, "", "Charge "+ch.ID+" has already been refunded.")
	case amount > remaining:
		return refuse(codeAmountTooLarge, "amount", "Refund amount ("+strconv.FormatInt(amount, 10)+
			") is greater than unrefunded amount on charge ("+strconv.FormatInt(remaining, 10)+")")
	}
	re := &Refund{ID: newID("re_"), Object: "refund", Amount: amount, Charge: ch.ID, Created: s.cfg.Now().Unix(),
		Currency: ch.Currency, Metadata: in.metadata, PaymentIntent: ch.PaymentIntent, Reason: optStr(in.reason), Status: statusSucceeded}
	updated := *ch
	updated.AmountRefunded += amount
	updated.Refunded = updated.AmountRefunded == updated.Amount
	return change{charge: &updated, refund: re, status: http.StatusOK, body: encodeJSON(re),
		events: []pendingEvent{{eventChargeRefunded, &updated}}}
}

// listRefunds is GET /v1/refunds (https://docs.stripe.com/api/refunds/list),
// optionally of one payment_intent or charge.
func (s *Server) listRefunds(w http.ResponseWriter, r *http.Request) {
	s.serveGet(w, r, listRefundsSpec, func(p params) (any, *apiError) {
		a, e := parsePaging(p)
		if e != nil {
			return nil, e
		}
		if _, e := p.expandParam(); e != nil {
			return nil, e
		}
		pi, charge := p.scalar["payment_intent"], p.scalar["charge"]
		items, more, e := page(s.refunds, a, "refund", func(re *Refund) string { return re.ID }, func(re *Refund) bool {
			return a.created.contains(re.Created) && (pi == "" || re.PaymentIntent == pi) && (charge == "" || re.Charge == charge)
		})
		if e != nil {
			return nil, e
		}
		return listBody[*Refund]{Object: "list", Data: items, HasMore: more, URL: "/v1/refunds"}, nil
	})
}

// getRefund is GET /v1/refunds/{id}.
func (s *Server) getRefund(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	s.serveGet(w, r, retrieveRefundSpec, func(p params) (any, *apiError) {
		if _, e := p.expandParam(); e != nil {
			return nil, e
		}
		re := s.refundByID[id]
		if re == nil {
			return nil, notFound("refund", "refund", id)
		}
		return re, nil
	})
}
