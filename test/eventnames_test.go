package test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/retrysafe/booking/domain"
)

// eventNameFinding is one string literal that spells an event type name.
type eventNameFinding struct {
	line int
	lit  string
}

// eventNameLiterals returns the string literals of Go source src (file is
// its slash path from the module root) that spell one of names: the whole
// literal is the name, or the literal quotes it for SQL ('Name'). Files of
// package domain (domain/, not its subdirectories) are the names' home and
// return nothing; prose that mentions a name inside a longer message does
// not count, nor do comments.
func eventNameLiterals(t *testing.T, file string, src []byte, names []string) []eventNameFinding {
	t.Helper()
	if dir, _ := filepath.Split(file); dir == "domain/" {
		return nil
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("parse %s: %v", file, err)
	}
	var out []eventNameFinding
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		s, err := strconv.Unquote(lit.Value)
		if err != nil {
			s = lit.Value
		}
		for _, name := range names {
			if s == name || strings.Contains(s, "'"+name+"'") {
				out = append(out, eventNameFinding{line: fset.Position(lit.Pos()).Line, lit: s})
				break
			}
		}
		return true
	})
	return out
}

// TestEventTypeNamesHome: event type names are spelled only in package
// domain (its constants and EventType methods); every other non-test file
// names an event type by domain's constants, so renaming or finding the
// users of a type is a compiler's job, and no package (the event stores'
// queries among them) holds a domain rule as a list of names.
func TestEventTypeNamesHome(t *testing.T) {
	t.Parallel()
	var names []string
	for _, e := range domain.EventTypes() {
		names = append(names, e.EventType())
	}
	if len(names) < 20 || !slices.Contains(names, domain.TypeOrderPlaced) {
		t.Fatalf("domain.EventTypes() gives %d names without %s", len(names), domain.TypeOrderPlaced)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	files := moduleGoFiles(t, root)
	if !slices.Contains(files, "domain/names.go") || !slices.Contains(files, "projections/readmodels.go") {
		t.Fatalf("scanned %d files without domain/names.go or projections/readmodels.go: wrong root %s", len(files), root)
	}
	// The scan must see the names in their home, or it sees nothing at all.
	src, err := os.ReadFile(filepath.Join(root, "domain/names.go"))
	if err != nil {
		t.Fatal(err)
	}
	if got := eventNameLiterals(t, "elsewhere/names.go", src, names); len(got) < len(names) {
		t.Fatalf("the detector finds %d of the %d names in domain/names.go", len(got), len(names))
	}
	for _, file := range files {
		src, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range eventNameLiterals(t, file, src, names) {
			t.Errorf("%s:%d: event type name spelled outside domain: %q (use domain's constant)", file, f.line, f.lit)
		}
	}

	t.Run("planted snippets are flagged", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			file, src string
			want      int
		}{
			{"commands/x.go", "package commands\nvar m = map[string]bool{\"OrderConfirmed\": true, \"OrderFailed\": true}\n", 2},
			{"projections/x.go", "package projections\nfunc f(t string) bool { switch t { case \"SeatsHeld\": return true }; return false }\n", 1},
			{"eventstore/pgstore/x.go", "package pgstore\nconst q = `SELECT 1 FROM events WHERE type IN ('RefundRequested')`\n", 1},
			{"domain/sub/x.go", "package sub\nconst n = \"OrderPlaced\"\n", 1},
			// Allowed: the home, prose, comments, other words.
			{"domain/x.go", "package domain\nconst n = \"OrderPlaced\"\n", 0},
			{"commands/x.go", "package commands\nvar s = \"no OrderPlaced of order %s\"\n", 0},
			{"commands/x.go", "package commands\n// \"OrderPlaced\" only in a comment\nvar s = \"Order\"\n", 0},
		} {
			if got := eventNameLiterals(t, c.file, []byte(c.src), names); len(got) != c.want {
				t.Errorf("eventNameLiterals(%s, %q) = %v, want %d finding(s)", c.file, c.src, got, c.want)
			}
		}
	})
}
