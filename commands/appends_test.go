package commands

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// directAppends returns the calls of appendEvents and appendResolving (as
// file:line) in the Go source src of file.
func directAppends(t *testing.T, file string, src []byte) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("parse %s: %v", file, err)
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		var name string
		switch fn := call.Fun.(type) {
		case *ast.SelectorExpr:
			name = fn.Sel.Name
		case *ast.Ident:
			name = fn.Name
		}
		if name == "appendEvents" || name == "appendResolving" {
			out = append(out, fset.Position(call.Pos()).String())
		}
		return true
	})
	return out
}

// TestOneWritePath: every state change of this package goes through the
// load–decide–append helper (decideOnce, and update and commit on top of
// it), so the direct append calls are only the helper's, the encoding
// step's (appendEvents calls appendResolving) and the hold batcher's
// batched append: at most three in the package's non-test code.
func TestOneWritePath(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var calls []string
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, directAppends(t, file, src)...)
	}
	if len(calls) == 0 {
		t.Fatal("no append call found: the scan sees nothing")
	}
	if len(calls) > 3 {
		t.Errorf("%d direct append calls, want at most 3 (go through decideOnce, update or commit):\n%s",
			len(calls), strings.Join(calls, "\n"))
	}

	t.Run("planted calls are counted", func(t *testing.T) {
		src := "package commands\nfunc f() {\n\th.appendEvents(ctx, n, e, m)\n\t_, _ = h.appendResolving(ctx, n, e)\n\tappendEvents()\n\t// h.appendEvents(ctx) in a comment\n\th.commit(ctx, s, m)\n}\n"
		if got := directAppends(t, "x.go", []byte(src)); len(got) != 3 {
			t.Errorf("directAppends = %v, want 3 calls", got)
		}
	})
}
