package commands

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"testing"

	"github.com/retrysafe/booking/domain"

	"github.com/retrysafe/booking/eventstore"
)

// TestFollowUpAhead: what a round of the process manager knows of the log
// after each event decides which drives and key statements are moot.
func TestFollowUpAhead(t *testing.T) {
	t.Parallel()
	ev := func(stream, typ string) eventstore.RecordedEvent {
		return eventstore.RecordedEvent{Stream: stream, Type: typ}
	}
	ready := []eventstore.RecordedEvent{
		ev("order-a", "OrderPlaced"),           // 0: confirmed later (ahead)
		ev("order-b", "OrderPlaced"),           // 1: nothing later
		ev("order-c", "OrderPlaced"),           // 2: an attempt started later: not an end
		ev("order-c", "PaymentAttemptStarted"), // 3
		ev("order-d", "OrderConfirmed"),        // 4: cancel requested later
		ev("order-d", "OrderCancelRequested"),  // 5: the last drive of d
	}
	ahead := []eventstore.RecordedEvent{ev("order-a", "PaymentSucceeded"), ev("order-a", "OrderConfirmed")}
	a := newFollowUpAhead(ready, ahead)
	for i, want := range []laterOf{
		{drive: true, ends: true},
		{},
		{},
		{},
		{drive: true, ends: true},
		{},
	} {
		if got := a.at(i, ready[i].Stream); got != want {
			t.Errorf("event %d (%s %s): %+v, want %+v", i, ready[i].Stream, ready[i].Type, got, want)
		}
	}
}

// TestFollowedUpTypesAreTheSwitchCases: FollowedUp names exactly the event
// types of followUp's type switch (read from the source), so a case added
// there without a FollowedUp entry — which would let a test's settle pass
// before its follow-up ran — fails here.
func TestFollowedUpTypesAreTheSwitchCases(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "followups.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var cases []string
	ast.Inspect(f, func(n ast.Node) bool {
		fd, ok := n.(*ast.FuncDecl)
		if !ok || fd.Name.Name != "followUp" {
			return true
		}
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSwitchStmt)
			if !ok || len(cases) > 0 {
				return true
			}
			for _, st := range ts.Body.List {
				for _, e := range st.(*ast.CaseClause).List {
					if sel, ok := e.(*ast.SelectorExpr); ok {
						cases = append(cases, sel.Sel.Name)
					}
				}
			}
			return false
		})
		return false
	})
	if len(cases) == 0 {
		t.Fatal("no type switch found in followUp")
	}
	slices.Sort(cases)
	var mapped []string
	for _, e := range domain.EventTypes() {
		if FollowedUp(e.EventType()) {
			mapped = append(mapped, e.EventType())
		}
	}
	slices.Sort(mapped)
	if !slices.Equal(cases, mapped) {
		t.Errorf("followUp's cases %v, FollowedUp's types %v: keep them the same", cases, mapped)
	}
}
