package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/alecthomas/kong"

	"github.com/retrysafe/booking/cmd/booking/internal/configerr"
)

// The environment variables of booking are the env tags of its commands'
// flags: a new setting is one struct field with its env tag, and from then
// on it is known (no unknown-variable warning) and named with its flag in
// configuration errors. BOOKING_TEST_* is the test build's and the test
// suite's (fault injection, throwaway databases): never reported.
const (
	variablePrefix     = "BOOKING_"
	testVariablePrefix = "BOOKING_TEST_"
)

// requirement is a setting that another one makes required: when the
// variable when is set (from the environment or its flag), one of need
// must be set too, for the reason why.
type requirement struct {
	when string
	need []string
	why  string
}

// requirements are the settings other settings make required; a new rule
// is one line. Each applies to the commands that have both flags.
var requirements = []requirement{
	{when: "BOOKING_STRIPE_SECRET_KEY", need: []string{"BOOKING_PROVIDER_WEBHOOK_SECRET"},
		why: "Stripe's webhooks are verified with the endpoint's signing secret (whsec_…)"},
}

// replacedVariables are variables no command reads any more, each with
// what replaced it: set, they are reported as replaced rather than as a
// misspelling.
var replacedVariables = map[string]string{
	"BOOKING_PPROF_ADDR": "BOOKING_ADMIN_ADDR (the admin listener serves the profiler and /metrics)",
}

// KnownVariables returns the sorted environment variables of the flags of
// n and of every command beneath it.
func KnownVariables(n *kong.Node) []string {
	seen := map[string]bool{}
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		for _, f := range n.Flags {
			if f.Tag != nil {
				for _, e := range f.Tag.Envs {
					seen[e] = true
				}
			}
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(n)
	out := make([]string, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// UnknownVariables returns one warning for each BOOKING_* variable of
// environ ("NAME=value" entries) that is not in known (nor BOOKING_TEST_*),
// naming what replaced it (replacedVariables) or else the nearest known
// variable: a misspelt or retired setting is otherwise silently ignored.
// The values are never shown.
func UnknownVariables(environ, known []string) []string {
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, variablePrefix) || strings.HasPrefix(name, testVariablePrefix) || slices.Contains(known, name) {
			continue
		}
		if by, ok := replacedVariables[name]; ok {
			out = append(out, fmt.Sprintf("%s is set but no booking command reads it any more; it was replaced by %s", name, by))
			continue
		}
		out = append(out, fmt.Sprintf("%s is set but no booking command reads it; did you mean %s?", name, nearest(name, known)))
	}
	slices.Sort(out)
	return out
}

// nearest returns the name of names closest to s by edit distance (the
// first of them on a tie).
func nearest(s string, names []string) string {
	best, bestD := "", -1
	for _, n := range names {
		if d := editDistance(s, n); bestD < 0 || d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// CheckRequirements returns a configuration error for the first
// requirement the selected command's settings break, naming the missing
// variable and its flag.
func CheckRequirements(kctx *kong.Context) error {
	flags := map[string]*kong.Flag{}
	for _, f := range kctx.Flags() {
		if f.Tag != nil {
			for _, e := range f.Tag.Envs {
				flags[e] = f
			}
		}
	}
	set := func(variable string) bool {
		f := flags[variable]
		s, _ := kctx.FlagValue(f).(string)
		return strings.TrimSpace(s) != ""
	}
	for _, r := range requirements {
		if flags[r.when] == nil || !set(r.when) || slices.ContainsFunc(r.need, func(v string) bool { return flags[v] == nil }) {
			continue
		}
		if !slices.ContainsFunc(r.need, set) {
			return configerr.New("--"+flags[r.need[0]].Name+" ("+r.need[0]+")", "required: %s; set %s",
				r.why, strings.Join(r.need, " or "))
		}
	}
	return nil
}
