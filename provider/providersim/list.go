package providersim

import (
	"net/http"
	"strconv"
)

// Stripe's list endpoints (https://docs.stripe.com/api/pagination) answer
// {"object":"list","data":[…],"has_more":bool,"url":"/v1/…"}, newest first,
// at most limit (1–100, default 10) objects, after the cursor
// starting_after (older objects) or before ending_before (newer ones).
// Lists are consistent: an object is listed as soon as it is created
// (https://docs.stripe.com/search#data-freshness).

var listIntentsSpec = spec{
	scalars: set("created", "limit", "starting_after", "ending_before"),
	hashes:  map[string]map[string]bool{"created": set("gt", "gte", "lt", "lte")},
	arrays:  set("expand"),
}

// listBody is Stripe's list object.
type listBody[T any] struct {
	Object  string `json:"object"` // "list"
	Data    []T    `json:"data"`
	HasMore bool   `json:"has_more"`
	URL     string `json:"url"`
}

// pageArgs are a list request's paging parameters.
type pageArgs struct {
	limit         int
	after, before string // object ids
	created       createdRange
}

// createdRange is a filter on created (Unix seconds), bounds inclusive.
type createdRange struct{ from, to int64 }

func (c createdRange) contains(t int64) bool { return t >= c.from && t <= c.to }

// allTime is the created range of a request without a created filter.
var allTime = createdRange{from: -1 << 62, to: 1 << 62}

// limitParam reads limit: 1 to 100, default 10.
func limitParam(p params) (int, *apiError) {
	n, ok, e := p.intParam("limit")
	switch {
	case e != nil:
		return 0, e
	case !ok:
		return 10, nil
	case n < 1 || n > 100:
		return 0, invalidParam("limit", "", "This value must be between 1 and 100 (it is "+strconv.FormatInt(n, 10)+").")
	}
	return int(n), nil
}

// parsePaging reads limit, starting_after, ending_before and created
// (created=N, or created[gt|gte|lt|lte]=N).
func parsePaging(p params) (pageArgs, *apiError) {
	a := pageArgs{created: allTime}
	var e *apiError
	if a.limit, e = limitParam(p); e != nil {
		return a, e
	}
	a.after, a.before = p.scalar["starting_after"], p.scalar["ending_before"]
	if a.after != "" && a.before != "" {
		return a, invalidParam("", "", "You may only specify one of these parameters: ending_before, starting_after.")
	}
	if n, ok, e := p.intParam("created"); e != nil {
		return a, e
	} else if ok {
		a.created = createdRange{n, n}
	}
	for op, v := range p.hash["created"] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return a, invalidParam("created["+op+"]", codeParameterInvalidInteger, "Invalid integer: "+v)
		}
		switch op {
		case "gt":
			a.created.from = max(a.created.from, n+1)
		case "gte":
			a.created.from = max(a.created.from, n)
		case "lt":
			a.created.to = min(a.created.to, n-1)
		case "lte":
			a.created.to = min(a.created.to, n)
		}
	}
	return a, nil
}

// page returns the page of items (oldest first, as stored) that a
// selects, newest first: idOf names an item, keep filters. It refuses a
// cursor that names no item (resource_missing), as Stripe does.
func page[T any](items []T, a pageArgs, object string, idOf func(T) string, keep func(T) bool) ([]T, bool, *apiError) {
	hi, lo := len(items), -1 // candidates are items[lo+1 : hi]
	for _, c := range []struct {
		id    string
		param string
	}{{a.after, "starting_after"}, {a.before, "ending_before"}} {
		if c.id == "" {
			continue
		}
		i := indexOf(items, c.id, idOf)
		if i < 0 {
			return nil, false, &apiError{status: http.StatusBadRequest, obj: ErrorObject{Type: typeInvalidRequest,
				Code: codeResourceMissing, Param: c.param, Message: "No such " + object + ": '" + c.id + "'"}}
		}
		if c.param == "starting_after" {
			hi = i
		} else {
			lo = i
		}
	}
	var out []T
	more := false
	if a.before != "" {
		// The limit objects just newer than the cursor, shown newest first.
		for i := lo + 1; i < hi; i++ {
			if !keep(items[i]) {
				continue
			}
			if len(out) == a.limit {
				more = true
				break
			}
			out = append(out, items[i])
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
		return orEmpty(out), more, nil
	}
	for i := hi - 1; i > lo; i-- {
		if !keep(items[i]) {
			continue
		}
		if len(out) == a.limit {
			more = true
			break
		}
		out = append(out, items[i])
	}
	return orEmpty(out), more, nil
}

func indexOf[T any](items []T, id string, idOf func(T) string) int {
	for i := len(items) - 1; i >= 0; i-- {
		if idOf(items[i]) == id {
			return i
		}
	}
	return -1
}

// orEmpty returns s, or an empty (not nil) slice: a JSON list.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// listPaymentIntents is GET /v1/payment_intents
// (https://docs.stripe.com/api/payment_intents/list).
func (s *Server) listPaymentIntents(w http.ResponseWriter, r *http.Request) {
	s.serveGet(w, r, listIntentsSpec, func(p params) (any, *apiError) {
		a, e := parsePaging(p)
		if e != nil {
			return nil, e
		}
		expand, e := p.expandParam("data.latest_charge")
		if e != nil {
			return nil, e
		}
		items, more, e := page(s.intents, a, "payment_intent", intentID,
			func(it *intent) bool { return a.created.contains(it.pi.Created) })
		if e != nil {
			return nil, e
		}
		return listBody[*PaymentIntent]{Object: "list", Data: s.renderAllLocked(items, expand["data.latest_charge"]),
			HasMore: more, URL: "/v1/payment_intents"}, nil
	})
}

func intentID(it *intent) string { return it.pi.ID }

// renderAllLocked renders the intents' PaymentIntents.
func (s *Server) renderAllLocked(items []*intent, expandCharge bool) []*PaymentIntent {
	out := make([]*PaymentIntent, len(items))
	for i, it := range items {
		out[i] = s.renderWithLocked(it.pi, nil, expandCharge)
	}
	return out
}
