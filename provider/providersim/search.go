package providersim

import (
	"encoding/base64"
	"net/http"
	"strings"
	"time"
)

// Search (https://docs.stripe.com/api/payment_intents/search, query
// language https://docs.stripe.com/search#search-query-language): the
// simulator takes terms field:'value' joined by AND, where field is
// metadata['key'], status or currency (values in single or double quotes,
// a backslash escaping a quote). Results are newest first, limit (1–100,
// default 10) a page, next_page the token of the next one.
//
// Search is eventually consistent at Stripe (https://docs.stripe.com/search#data-freshness);
// the simulator models it with a lag: a PaymentIntent is found only once
// the simulator's clock has passed its creation (base clock) plus the lag
// (Config.SearchLag, or the fault search_lag_ms). Advancing the clock
// past the lag makes it searchable; a lag longer than the advance keeps
// search blind. Once found, it shows its current state.

var searchIntentsSpec = spec{scalars: set("query", "limit", "page"), arrays: set("expand")}

// searchBody is Stripe's search_result object.
type searchBody[T any] struct {
	Object   string  `json:"object"` // "search_result"
	Data     []T     `json:"data"`
	HasMore  bool    `json:"has_more"`
	NextPage *string `json:"next_page"`
	URL      string  `json:"url"`
}

// term is one field:'value' of a query; key is the metadata key.
type term struct{ field, key, value string }

// searchPaymentIntents is GET /v1/payment_intents/search.
func (s *Server) searchPaymentIntents(w http.ResponseWriter, r *http.Request) {
	s.serveGet(w, r, searchIntentsSpec, func(p params) (any, *apiError) {
		q, ok := p.scalar["query"]
		if !ok {
			return nil, missingParam("query")
		}
		terms, e := parseQuery(q)
		if e != nil {
			return nil, e
		}
		a := pageArgs{created: allTime}
		if a.limit, e = limitParam(p); e != nil {
			return nil, e
		}
		expand, e := p.expandParam("data.latest_charge")
		if e != nil {
			return nil, e
		}
		if tok, ok := p.scalar["page"]; ok {
			id, err := base64.RawURLEncoding.DecodeString(tok)
			if err != nil || s.intentByID[string(id)] == nil {
				return nil, invalidParam("page", "", "Invalid page token.")
			}
			a.after = string(id)
		}
		visible := s.nowLocked().Add(-s.searchLagLocked())
		items, more, e := page(s.intents, a, "payment_intent", intentID, func(it *intent) bool {
			return !it.createdAt.After(visible) && matches(it.pi, terms)
		})
		if e != nil {
			return nil, e
		}
		out := searchBody[*PaymentIntent]{Object: "search_result", Data: s.renderAllLocked(items, expand["data.latest_charge"]),
			HasMore: more, URL: "/v1/payment_intents/search"}
		if more {
			next := base64.RawURLEncoding.EncodeToString([]byte(items[len(items)-1].pi.ID))
			out.NextPage = &next
		}
		return out, nil
	})
}

// searchLagLocked is the lag in force: the fault's, else the configured one.
func (s *Server) searchLagLocked() time.Duration {
	if ms := s.faults.SearchLagMS; ms != nil {
		return time.Duration(*ms) * time.Millisecond
	}
	return max(s.cfg.SearchLag, 0)
}

func matches(pi *PaymentIntent, terms []term) bool {
	for _, t := range terms {
		var got string
		switch t.field {
		case "metadata":
			v, ok := pi.Metadata[t.key]
			if !ok {
				return false
			}
			got = v
		case "status":
			got = pi.Status
		case "currency":
			got, t.value = pi.Currency, strings.ToLower(t.value)
		}
		if got != t.value {
			return false
		}
	}
	return true
}

// parseQuery parses the query subset the simulator serves.
func parseQuery(q string) ([]term, *apiError) {
	bad := func(msg string) ([]term, *apiError) {
		return nil, invalidParam("query", "", msg)
	}
	var terms []term
	rest := strings.TrimSpace(q)
	for {
		var t term
		i := strings.IndexAny(rest, "[:")
		if i <= 0 {
			return bad("Invalid query: expected field:'value' at " + quoteRest(rest) + ".")
		}
		t.field, rest = rest[:i], rest[i:]
		if t.field == "metadata" {
			if !strings.HasPrefix(rest, "[") {
				return bad("Invalid query: metadata needs a key, as in metadata['order_id'].")
			}
			key, after, ok := quoted(rest[1:])
			if !ok || !strings.HasPrefix(after, "]") {
				return bad("Invalid query: metadata needs a quoted key, as in metadata['order_id'].")
			}
			t.key, rest = key, after[1:]
		} else if t.field != "status" && t.field != "currency" {
			return bad("Field `" + t.field + "` is an unsupported search field for resource `payment_intents` in the simulator (it serves metadata, status and currency).")
		}
		if !strings.HasPrefix(rest, ":") {
			return bad("Invalid query: the simulator serves only exact matches field:'value'.")
		}
		value, after, ok := quoted(rest[1:])
		if !ok {
			return bad("Invalid query: the value of " + t.field + " must be quoted.")
		}
		t.value = value
		terms = append(terms, t)
		rest = strings.TrimLeft(after, " ")
		if rest == "" {
			return terms, nil
		}
		and, tail, _ := strings.Cut(rest, " ")
		if and != "AND" {
			return bad("Invalid query: the simulator joins terms with AND only, not " + quoteRest(rest) + ".")
		}
		rest = strings.TrimLeft(tail, " ")
	}
}

// quoted reads a value in single or double quotes at the start of s (a
// backslash escapes the next character) and returns it and what follows.
func quoted(s string) (string, string, bool) {
	if s == "" || s[0] != '\'' && s[0] != '"' {
		return "", s, false
	}
	q := s[0]
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && i+1 < len(s):
			i++
			b.WriteByte(s[i])
		case c == q:
			return b.String(), s[i+1:], true
		default:
			b.WriteByte(c)
		}
	}
	return "", s, false
}

func quoteRest(s string) string {
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return "`" + s + "`"
}
