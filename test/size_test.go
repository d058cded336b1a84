package test

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// maxFuncLines is the longest a non-test function outside test/ may be,
// from its func line to its closing brace.
const maxFuncLines = 80

// maxMainLines bounds package main (cmd/booking/*.go without its tests),
// the wiring and the command line: the rest lives in packages beneath it.
const maxMainLines = 1200

// TestCode_FunctionsAndMainStaySmall: no non-test function outside test/
// runs over maxFuncLines lines, and package
// main stays within maxMainLines lines, so each reads at once and serve
// reads as a list of its parts.
func TestCode_FunctionsAndMainStaySmall(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	long, funcs, mainLines := measureCode(t, root)
	t.Logf("%d non-test functions outside test/, %d over %d lines; package main %d lines", funcs, len(long), maxFuncLines, mainLines)
	if funcs < 1000 {
		t.Fatalf("measured %d functions; want at least 1000 (is the walk broken?)", funcs)
	}
	if mainLines > maxMainLines {
		t.Errorf("package main (cmd/booking/*.go without tests) has %d lines, want at most %d: move a cohesive part into a package under cmd/booking/internal",
			mainLines, maxMainLines)
	}
	for _, name := range sortedKeys(long) {
		t.Errorf("%s has %d lines, want at most %d: split it into named steps", name, long[name], maxFuncLines)
	}
}

// measureCode parses every non-test Go file of the module under root
// outside test/ and returns the functions over maxFuncLines lines (by
// "path Recv.Name" or "path Name") with their lengths, the number of
// functions measured, and the lines of package main's non-test files in
// cmd/booking.
func measureCode(t *testing.T, root string) (long map[string]int, funcs, mainLines int) {
	t.Helper()
	long = map[string]int{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || rel == "test") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, p, src, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("parse %s: %w", rel, err)
		}
		if path.Dir(rel) == "cmd/booking" && f.Name.Name == "main" {
			mainLines += bytes.Count(src, []byte("\n"))
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			funcs++
			if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFuncLines {
				long[rel+" "+funcName(fd)] = n
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return long, funcs, mainLines
}

// funcName is fd's name, with its receiver's type: "Handler.beginIntent".
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	for {
		switch x := typ.(type) {
		case *ast.StarExpr:
			typ = x.X
			continue
		case *ast.IndexExpr:
			typ = x.X
			continue
		case *ast.IndexListExpr:
			typ = x.X
			continue
		case *ast.Ident:
			return x.Name + "." + fd.Name.Name
		}
		return fd.Name.Name
	}
}

// sortedKeys returns m's keys in order.
func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestCode_SizeCheckFails: the measure sees a long function, a long
// method (by its receiver's type), package main's lines, and skips tests
// and test/.
func TestCode_SizeCheckFails(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	body := strings.Repeat("\tx++\n", maxFuncLines-2)
	write := func(rel, src string) {
		t.Helper()
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("cmd/booking/main.go", "package main\n\nvar x int\n\nfunc ok() {\n"+body+"}\n\nfunc long() {\n"+body+"\tx++\n}\n")
	write("a/a.go", "package a\n\ntype T[K any] struct{}\n\nvar x int\n\nfunc (*T[K]) Long() {\n"+body+"\tx++\n}\n")
	write("a/a_test.go", "package a\n\nfunc longTest() {\n"+body+"\tx++\n}\n")
	write("test/t.go", "package test\n\nvar x int\n\nfunc long() {\n"+body+"\tx++\n}\n")
	long, funcs, mainLines := measureCode(t, root)
	want := map[string]int{"cmd/booking/main.go long": maxFuncLines + 1, "a/a.go T.Long": maxFuncLines + 1}
	if len(long) != len(want) || long["cmd/booking/main.go long"] != want["cmd/booking/main.go long"] || long["a/a.go T.Long"] != want["a/a.go T.Long"] {
		t.Errorf("measureCode long functions = %v, want %v", long, want)
	}
	if funcs != 3 {
		t.Errorf("measureCode measured %d functions, want 3 (tests and test/ skipped)", funcs)
	}
	if want := 2*maxFuncLines + 6; mainLines != want {
		t.Errorf("measureCode counted %d lines of package main, want %d", mainLines, want)
	}
}
