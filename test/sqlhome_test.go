package test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// eventTableSQL matches SQL that names the event store's own tables
// (events, streams) as the target of FROM, JOIN, INTO, UPDATE or TABLE.
// Only uppercase keywords count: the project writes SQL that way, and prose
// such as "read from events" must not match.
var eventTableSQL = regexp.MustCompile(`\b(FROM|JOIN|INTO|UPDATE|TABLE)\s+(events|streams)\b`)

// anySQL matches any SQL statement or advisory-lock call.
var anySQL = regexp.MustCompile(`\b(SELECT|INSERT|UPDATE|DELETE)\b|pg_(try_)?advisory`)

// sqlFinding is one string literal that breaks a rule.
type sqlFinding struct {
	file string
	line int
	sql  string
}

// findSQL returns the string literals of Go source src that match re. Only
// literals count, not comments.
func findSQL(t *testing.T, file string, src []byte, re *regexp.Regexp) []sqlFinding {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("parse %s: %v", file, err)
	}
	var out []sqlFinding
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		s, err := strconv.Unquote(lit.Value)
		if err != nil {
			s = lit.Value
		}
		if re.MatchString(s) {
			out = append(out, sqlFinding{file: file, line: fset.Position(lit.Pos()).Line, sql: strings.Join(strings.Fields(s), " ")})
		}
		return true
	})
	return out
}

// moduleGoFiles returns the non-test .go files of the module (paths relative
// to its root, slash-separated), skipping testdata and hidden directories.
func moduleGoFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// sqlViolations applies the two rules to file (relative to the module root)
// and returns what breaks them: SQL on the event store's tables outside
// eventstore/pgstore and migrations, and any SQL in package main.
func sqlViolations(t *testing.T, file string, src []byte) []sqlFinding {
	t.Helper()
	var out []sqlFinding
	if !strings.HasPrefix(file, "eventstore/pgstore/") && !strings.HasPrefix(file, "migrations/") {
		out = append(out, findSQL(t, file, src, eventTableSQL)...)
	}
	if dir, _ := filepath.Split(file); dir == "cmd/booking/" {
		for _, f := range findSQL(t, file, src, anySQL) {
			if !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	return out
}

// TestSQLHome: SQL on the event store's tables lives only in
// eventstore/pgstore (and the migrations), so a second backend replaces one
// package; package main holds no SQL at all.
func TestSQLHome(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root %s: %v", root, err)
	}
	files := moduleGoFiles(t, root)
	if !slices.Contains(files, "eventstore/pgstore/pgstore.go") || !slices.Contains(files, "cmd/booking/main.go") {
		t.Fatalf("scanned %d files without eventstore/pgstore/pgstore.go or cmd/booking/main.go: wrong root %s", len(files), root)
	}
	// The scan must see the SQL it allows, or it sees nothing at all.
	src, err := os.ReadFile(filepath.Join(root, "eventstore/pgstore/queries.go"))
	if err != nil {
		t.Fatal(err)
	}
	if len(findSQL(t, "eventstore/pgstore/queries.go", src, eventTableSQL)) == 0 {
		t.Fatal("the detector finds no SQL on the event tables in eventstore/pgstore/queries.go")
	}
	for _, file := range files {
		src, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range sqlViolations(t, file, src) {
			t.Errorf("%s:%d: SQL outside its home: %q", f.file, f.line, f.sql)
		}
	}

	t.Run("planted snippets are flagged", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			file, src string
			want      int
		}{
			{"commands/x.go", "package commands\nconst q = `SELECT count(*) FROM events WHERE stream = $1`\n", 1},
			{"projections/x.go", "package projections\nvar q = \"DELETE FROM streams\"\n", 1},
			{"projections/x.go", "package projections\nconst q = `SELECT s.name FROM rm_x s\n  JOIN streams t ON t.name = s.id`\n", 1},
			{"provider/x.go", "package provider\nconst q = \"INSERT INTO events (stream) VALUES ($1)\"\n", 1},
			{"eventstore/x.go", "package eventstore\nconst q = `UPDATE streams SET x = 1`\n", 1},
			{"cmd/booking/x.go", "package main\nfunc f() { db.QueryRow(ctx, \"SELECT now()\") }\n", 1},
			{"cmd/booking/x.go", "package main\nconst q = `SELECT pg_try_advisory_lock($1)`\n", 1},
			{"cmd/booking/x.go", "package main\nconst q = \"pg_advisory_unlock\"\n", 1},
			{"cmd/booking/x.go", "package main\nconst q = `SELECT count(*) FROM events`\n", 1},
			// Allowed: the event store's home, the migrations, other tables
			// outside main, prose, comments, main's subpackages.
			{"eventstore/pgstore/x.go", "package pgstore\nconst q = `SELECT count(*) FROM events`\n", 0},
			{"migrations/x.go", "package migrations\nconst q = `CREATE TABLE events (id uuid)`\n", 0},
			{"projections/x.go", "package projections\nconst q = `SELECT * FROM projection_checkpoints`\n", 0},
			{"commands/x.go", "package commands\nvar s = \"read the events from events of the log\"\n", 0},
			{"cmd/booking/x.go", "package main\n// SELECT count(*) FROM events: only a comment\nvar s = \"events\"\n", 0},
			{"cmd/booking/internal/x/x.go", "package x\nconst q = `SELECT now()`\n", 0},
		} {
			if got := sqlViolations(t, c.file, []byte(c.src)); len(got) != c.want {
				t.Errorf("sqlViolations(%s, %q) = %v, want %d finding(s)", c.file, c.src, got, c.want)
			}
		}
	})
}
