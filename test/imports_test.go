package test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// module is the module path of this repository.
const module = "github.com/retrysafe/booking"

// listedPackage is the part of `go list -json` output the import rules read.
type listedPackage struct {
	ImportPath   string
	Standard     bool
	Deps         []string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

// TestImportRules keeps the import graph as the layout intends, from `go
// list -deps -json ./...` over the whole module:
//   - only the HTTP adapter (cmd/booking/internal/httpapi) and the payment
//     provider simulator (provider/providersim) import the chi router, in
//     their code or their tests;
//   - domain, eventstore (the interface package) and provider depend on the
//     standard library only (their tests may use more);
//   - nothing outside cmd/booking but the end-to-end suite (package test, which runs
//     the load generator's audit) imports a package of cmd/booking: it is
//     the top of the graph;
//   - only the Stripe adapter (provider/stripe) imports stripe-go outside
//     tests.
func TestImportRules(t *testing.T) {
	t.Parallel()
	pkgs := goListDeps(t, "./...")
	byPath := map[string]listedPackage{}
	for _, p := range pkgs {
		byPath[p.ImportPath] = p
	}
	if _, ok := byPath[module+"/cmd/booking/internal/httpapi"]; !ok {
		t.Fatalf("go list found no %s/cmd/booking/internal/httpapi among %d packages", module, len(pkgs))
	}

	chiAllowed := map[string]bool{module + "/cmd/booking/internal/httpapi": true, module + "/provider/providersim": true}
	importsChi := 0
	for _, p := range pkgs {
		if !strings.HasPrefix(p.ImportPath, module) {
			continue
		}
		for _, imp := range allImports(p) {
			if !strings.HasPrefix(imp, "github.com/go-chi/chi") {
				continue
			}
			if !chiAllowed[p.ImportPath] {
				t.Errorf("%s imports %s; only %v may import chi", p.ImportPath, imp, keys(chiAllowed))
			} else {
				importsChi++
			}
		}
	}
	if importsChi == 0 {
		t.Errorf("no package imports chi; the rule checks nothing")
	}

	for _, name := range []string{"domain", "eventstore", "provider"} {
		p, ok := byPath[module+"/"+name]
		if !ok {
			t.Errorf("go list did not list %s/%s", module, name)
			continue
		}
		for _, dep := range p.Deps {
			if d, ok := byPath[dep]; !ok || !d.Standard {
				t.Errorf("%s depends on %s; it may use the standard library only", name, dep)
			}
		}
	}

	const stripeAdapter = module + "/provider/stripe"
	importsStripe := 0
	for _, p := range pkgs {
		if !strings.HasPrefix(p.ImportPath, module) {
			continue
		}
		for _, imp := range p.Imports {
			if !inTree(imp, "github.com/stripe/stripe-go/v84") {
				continue
			}
			if p.ImportPath != stripeAdapter {
				t.Errorf("%s imports %s; only %s may import stripe-go outside tests", p.ImportPath, imp, stripeAdapter)
			} else {
				importsStripe++
			}
		}
	}
	if importsStripe == 0 {
		t.Errorf("%s does not import stripe-go; the rule checks nothing", stripeAdapter)
	}

	// The end-to-end suite (package test) is the one outside importer it
	// allows: it runs the load generator's audit as its invariant check.
	for _, p := range pkgs {
		if !strings.HasPrefix(p.ImportPath, module) || inTree(p.ImportPath, module+"/cmd/booking") || p.ImportPath == module+"/test" {
			continue
		}
		for _, imp := range allImports(p) {
			if inTree(imp, module+"/cmd/booking") {
				t.Errorf("%s imports %s; nothing imports cmd/booking", p.ImportPath, imp)
			}
		}
	}
}

// goListDeps runs `go list -deps -json patterns` in the module root and
// returns every package it lists.
func goListDeps(t *testing.T, patterns ...string) []listedPackage {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps", "-json"}, patterns...)...)
	cmd.Dir = ".."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps -json %v: %v\n%s", patterns, err, stderr.Bytes())
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// allImports returns p's imports, those of its tests included.
func allImports(p listedPackage) []string {
	return append(append(append([]string{}, p.Imports...), p.TestImports...), p.XTestImports...)
}

// inTree reports whether path is root or a package beneath it.
func inTree(path, root string) bool { return path == root || strings.HasPrefix(path, root+"/") }

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
