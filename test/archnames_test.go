package test

// ARCHITECTURE.md names files, functions, types and tests; a rename that
// forgets the map makes it lie. These tests hold the map to the code.

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// goNames is what the module's Go files (tests included) declare.
type goNames struct {
	pkgs    map[string]bool            // package names and directory base names
	top     map[string]map[string]bool // package name → its top-level names
	anyTop  map[string]bool            // every top-level name
	members map[string]map[string]bool // type name → its methods and fields
	anyMemb map[string]bool            // every method and field name
	inFile  map[string]map[string]bool // file (slash path from the root) → names declared in it
	base    map[string]bool            // base names of every file of the module
}

// indexGoNames parses every .go file under root (hidden directories,
// testdata and vendor skipped) and records the names it declares: top-level
// functions, types, constants and variables; methods by receiver type;
// struct fields (embedded types by their type name) and interface methods
// by type.
func indexGoNames(t *testing.T, root string) *goNames {
	t.Helper()
	n := &goNames{
		pkgs: map[string]bool{}, top: map[string]map[string]bool{}, anyTop: map[string]bool{},
		members: map[string]map[string]bool{}, anyMemb: map[string]bool{},
		inFile: map[string]map[string]bool{}, base: map[string]bool{},
	}
	add := func(m map[string]map[string]bool, k, v string) {
		if m[k] == nil {
			m[k] = map[string]bool{}
		}
		m[k][v] = true
	}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		n.base[name] = true
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("parse %s: %w", rel, err)
		}
		pkg := f.Name.Name
		n.pkgs[pkg] = true
		n.pkgs[path.Base(path.Dir(rel))] = true
		declare := func(name string) {
			add(n.top, pkg, name)
			n.anyTop[name] = true
			add(n.inFile, rel, name)
		}
		member := func(typ, name string) {
			add(n.members, typ, name)
			n.anyMemb[name] = true
			add(n.inFile, rel, name)
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil || len(d.Recv.List) == 0 {
					declare(d.Name.Name)
					continue
				}
				member(receiverType(d.Recv.List[0].Type), d.Name.Name)
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.ValueSpec:
						for _, id := range s.Names {
							declare(id.Name)
						}
					case *ast.TypeSpec:
						declare(s.Name.Name)
						typeMembers(s.Type, func(m string) { member(s.Name.Name, m) })
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// receiverType is the base type name of a method's receiver: T for T, *T,
// T[K] and *T[K].
func receiverType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// typeMembers calls f with the field names of a struct type (an embedded
// field by its type's name) and the method names of an interface type.
func typeMembers(e ast.Expr, f func(string)) {
	var fields *ast.FieldList
	switch x := e.(type) {
	case *ast.StructType:
		fields = x.Fields
	case *ast.InterfaceType:
		fields = x.Methods
	default:
		return
	}
	for _, fl := range fields.List {
		for _, id := range fl.Names {
			f(id.Name)
		}
		if len(fl.Names) == 0 {
			if name := receiverType(fl.Type); name != "" {
				f(name)
			} else if sel, ok := fl.Type.(*ast.SelectorExpr); ok {
				f(sel.Sel.Name)
			} else if st, ok := fl.Type.(*ast.StarExpr); ok {
				if sel, ok := st.X.(*ast.SelectorExpr); ok {
					f(sel.Sel.Name)
				}
			}
		}
	}
}

var (
	// codeSpanText is one inline code span's contents.
	codeSpanText = regexp.MustCompile("`([^`]+)`")
	// docFilePath is a file of the repository named by its path, such as
	// commands/intent.go or migrations/00008_x.sql.
	docFilePath = regexp.MustCompile(`^[\w.-]+(/[\w.-]+)*\.(go|sql|yaml|yml|md|sh|mod)$`)
	// docDirPath is a directory of the repository, such as eventstore/fanout
	// or domain/testdata/events/: at least one slash, no dot.
	docDirPath = regexp.MustCompile(`^[a-z][\w-]*(/[a-z][\w-]*)+/?$`)
	// docGoName is a Go name, possibly qualified (pkg.Type.Method), possibly
	// called (DerivedID(I, "x")), possibly behind a directory
	// (eventstore/logindex.Index).
	docGoName = regexp.MustCompile(`^((?:[a-z][\w-]*/)+)?([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(\(.*\))?$`)
	// docListed is a list of code spans: `a`, `b` and `c`.
	docListed = "`[^`]+`(?:(?:, |,? and |,? or )`[^`]+`)*"
	// docAfterFile is "`file.go`: `a`, `b`": names listed after their file.
	docAfterFile = regexp.MustCompile("`([\\w./-]+\\.go)`: (" + docListed + ")")
	// docBeforeFile is "`a` and `b` (`file.go`": names listed before their file.
	docBeforeFile = regexp.MustCompile("(" + docListed + ") \\(`([\\w./-]+\\.go)`")
)

// notGoNames are one-word code spans that look like Go names but are HTTP
// header names.
var notGoNames = map[string]bool{"Location": true, "Authorization": true, "Prefer": true}

// fileExt are the extensions of file names written with a dot (Type.json).
var fileExt = map[string]bool{"json": true, "go": true, "sql": true, "yaml": true, "md": true}

// looksLikeGoName says whether a single, unqualified word in a code span is
// meant as a Go name: it mixes upper and lower case and has no underscore
// (test functions aside). Lowercase words (`alone`, `send`), constants of
// other languages (`GOMEMLIMIT`, `EXISTS`) and snake_case (`order_id`,
// `BOOKING_X`) are other things: fields, values, SQL, variables.
func looksLikeGoName(s string) bool {
	if strings.ToLower(s) == s || strings.ToUpper(s) == s {
		return false
	}
	if strings.Contains(s, "_") {
		for _, p := range []string{"Test", "Benchmark", "Fuzz", "Example"} {
			if strings.HasPrefix(s, p) {
				return true
			}
		}
		return false
	}
	return true
}

// checkName returns why the code span s, read as a name, does not exist in
// the code ("" when it does or when s is no name).
func (n *goNames) checkName(root, s string) string {
	if docFilePath.MatchString(s) {
		if strings.Contains(s, "/") {
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(s))); err != nil {
				return "no such file"
			}
		} else if strings.HasSuffix(s, ".go") && !n.base[s] {
			return "no file of that name"
		}
		return ""
	}
	if docDirPath.MatchString(s) {
		if fi, err := os.Stat(filepath.Join(root, filepath.FromSlash(s))); err == nil && fi.IsDir() {
			return ""
		}
		if fi, err := os.Stat(filepath.Join(build.Default.GOROOT, "src", filepath.FromSlash(s))); err == nil && fi.IsDir() {
			return "" // a standard library package, such as container/heap
		}
		return "no such directory"
	}
	m := docGoName.FindStringSubmatch(s)
	if m == nil {
		return ""
	}
	parts := strings.Split(m[2], ".")
	if m[1] != "" {
		// eventstore/logindex.Index: the package's directory, then its name.
		dir := m[1] + parts[0]
		if len(parts) == 1 {
			return "" // a path such as net/http, checked above when it is the module's
		}
		if fi, err := os.Stat(filepath.Join(root, filepath.FromSlash(dir))); err != nil || !fi.IsDir() {
			return "no such directory " + dir
		}
	}
	if len(parts) == 1 {
		if !looksLikeGoName(parts[0]) || notGoNames[parts[0]] || n.anyTop[parts[0]] || n.anyMemb[parts[0]] {
			return ""
		}
		return "declared nowhere"
	}
	if fileExt[parts[len(parts)-1]] {
		return "" // a file name such as OrderPlaced.v2.json
	}
	if strings.ToLower(m[2]) == m[2] && n.members[parts[0]] == nil {
		return "" // a lowercase value with a dot (a setting, a step), not a type's member
	}
	first, rest := parts[0], parts[1:]
	ok := false
	if n.pkgs[first] && n.top[first][rest[0]] {
		ok, rest = true, rest[1:]
		first = parts[1]
	} else if n.members[first] != nil || n.anyTop[first] {
		ok = true
	}
	if !ok {
		return "neither a package nor a type: " + first
	}
	for i, r := range rest {
		if i == 0 && !n.members[first][r] {
			return fmt.Sprintf("%s has no method or field %s", first, r)
		}
		if i > 0 && !n.anyMemb[r] {
			return "no method or field " + r
		}
	}
	return ""
}

// archNameProblems returns every problem of the names in the Markdown file
// doc (relative to root): code spans naming a file, directory or Go name
// that does not exist, and names listed with a Go file ("`f.go`: `a`, `b`"
// or "`a` (`f.go`") that the file does not declare. It also returns how
// many names it checked each way.
func archNameProblems(t *testing.T, root, doc string, n *goNames) (problems []string, names, located int) {
	t.Helper()
	for _, l := range proseLines(t, filepath.Join(root, doc)) {
		for _, m := range codeSpanText.FindAllStringSubmatch(l.text, -1) {
			s := strings.TrimSpace(m[1])
			if why := n.checkName(root, s); why != "" {
				problems = append(problems, fmt.Sprintf("%s:%d: `%s`: %s", doc, l.n, s, why))
			} else if docGoName.MatchString(s) || docFilePath.MatchString(s) {
				names++
			}
		}
		inFile := func(file, list string) {
			decl, isFile := n.inFile[file]
			if !isFile {
				return // reported above when it does not exist
			}
			for _, m := range codeSpanText.FindAllStringSubmatch(list, -1) {
				g := docGoName.FindStringSubmatch(m[1])
				if g == nil || g[1] != "" {
					continue
				}
				parts := strings.Split(g[2], ".")
				last := parts[len(parts)-1]
				if len(parts) == 1 && !looksLikeGoName(last) {
					continue
				}
				located++
				if !decl[last] {
					problems = append(problems, fmt.Sprintf("%s:%d: `%s` is not declared in %s", doc, l.n, m[1], file))
				}
			}
		}
		for _, m := range docAfterFile.FindAllStringSubmatch(l.text, -1) {
			inFile(m[1], m[2])
		}
		for _, m := range docBeforeFile.FindAllStringSubmatch(l.text, -1) {
			// Only the names right before the parenthesis: "`a` and `b` (`f.go`".
			inFile(m[len(m)-1], m[1])
		}
	}
	return problems, names, located
}

// TestDocs_ArchitectureNamesExist: every file, directory, function, type,
// method, field and test that ARCHITECTURE.md names in a code span exists
// in the module, and a name listed with its file ("`commands/intent.go`:
// `Handler.reject`" or "`Handler.reject` (`commands/intent.go`)") is
// declared in that file.
func TestDocs_ArchitectureNamesExist(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	n := indexGoNames(t, root)
	if !n.members["core"]["beginIntent"] || !n.inFile["commands/intent.go"]["beginIntent"] {
		t.Fatal("the index does not see core.beginIntent in commands/intent.go: is the parser broken?")
	}
	problems, names, located := archNameProblems(t, root, "ARCHITECTURE.md", n)
	t.Logf("ARCHITECTURE.md: %d names checked, %d of them in their named file", names, located)
	for _, p := range problems {
		t.Error(p)
	}
	// The map names a few hundred things; far fewer means the scan broke.
	if names < 200 || located < 50 {
		t.Errorf("checked %d names, %d of them in their named file; want at least 200 and 50 (is the scan broken?)", names, located)
	}
}

// TestDocs_ArchitectureNameCheckFails: the check above reports what it
// should — a missing file, a missing function, a name in the wrong file —
// and lets other code spans (values, headers, variables) be.
func TestDocs_ArchitectureNameCheckFails(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	n := indexGoNames(t, root)
	for s, bad := range map[string]bool{
		"commands/intent.go":            false,
		"commands/nosuch.go":            true,
		"eventstore/fanout":             false,
		"eventstore/nosuch":             true,
		"core.beginIntent":              false,
		"core.noSuchMethod":             true,
		"domain.Intent.Resolve":         false,
		"domain.NoSuchThing":            true,
		"eventstore/logindex.Index":     false,
		"DerivedID(I, \"rejected\")":    false,
		"TestDocs_RelativeLinksResolve": false,
		"TestNoSuchTest_Anywhere":       true,
		"BOOKING_INTENT_RETENTION":      false,
		"Idempotency-Key":               false,
		"order_id":                      false,
		"alone":                         false,
		"GOMEMLIMIT":                    false,
	} {
		if got := n.checkName(root, s) != ""; got != bad {
			t.Errorf("checkName(%q) reports a problem: %v, want %v (%s)", s, got, bad, n.checkName(root, s))
		}
	}
	dir := t.TempDir()
	doc := filepath.Join(dir, "doc.md")
	text := "`commands/intent.go`: `core.beginIntent`, `core.placeOrder`; `Fingerprint` (`commands/ids.go`)\n"
	if err := os.WriteFile(doc, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(root, doc)
	if err != nil {
		t.Skipf("temporary directory outside the module's volume: %v", err)
	}
	problems, _, located := archNameProblems(t, root, rel, n)
	if located != 3 || len(problems) != 2 {
		t.Errorf("located %d names with %d problems, want 3 and 2 (placeOrder not in intent.go, Fingerprint not in ids.go): %q", located, len(problems), problems)
	}
}
