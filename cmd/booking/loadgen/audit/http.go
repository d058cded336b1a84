package audit

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// maxExamples bounds the 500s an HTTPStats keeps word for word.
const maxExamples = 50

// HTTPStats counts the answers clients received, for rule HTTP500: every
// request, each 500 (a violation: the service promises never to answer
// one, RFC 9110 §15.6.1 "Internal Server Error" being a bug), and each 502,
// 503 or 504 (RFC 9110 §15.6.3–15.6.5: a replica or the database away),
// split by whether a fault was being injected. The zero value is ready;
// safe for concurrent use.
type HTTPStats struct {
	mu              sync.Mutex
	requests        int
	gateway         map[int]int
	gatewayInFaults int
	count500        int
	examples        []string
}

// Record counts one answered request: method and path name it, status is
// the HTTP status, inFault says a fault was injected meanwhile, and detail
// (the problem's title or body, say) is kept with a 500.
func (h *HTTPStats) Record(method, path string, status int, inFault bool, detail string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.requests++
	switch {
	case status == 500:
		h.count500++
		if len(h.examples) < maxExamples {
			h.examples = append(h.examples, fmt.Sprintf("%s %s answered 500: %s", method, path, strings.TrimSpace(detail)))
		}
	case status >= 502 && status <= 504:
		if h.gateway == nil {
			h.gateway = map[int]int{}
		}
		h.gateway[status]++
		if inFault {
			h.gatewayInFaults++
		}
	}
}

// report fills rep's request counts and row HTTP500.
func (h *HTTPStats) report(rep *Report, row *Row, violate func(Rule, string, ...any)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	rep.Requests = h.requests
	rep.GatewayInFaults = h.gatewayInFaults
	if len(h.gateway) > 0 {
		rep.Gateway = map[int]int{}
		for k, v := range h.gateway {
			rep.Gateway[k] = v
		}
	}
	row.Checked = h.requests
	if row.Skipped != "" {
		return
	}
	for _, e := range h.examples {
		violate(HTTP500, "%s", e)
	}
	if n := h.count500 - len(h.examples); n > 0 {
		violate(HTTP500, "%d more 500 answers", n)
	}
}

func gatewayText(g map[int]int) string {
	if len(g) == 0 {
		return "none"
	}
	codes := make([]int, 0, len(g))
	for c := range g {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	parts := make([]string, len(codes))
	for i, c := range codes {
		parts[i] = fmt.Sprintf("%d×%d", g[c], c)
	}
	return strings.Join(parts, ", ")
}
