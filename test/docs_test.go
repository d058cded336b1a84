package test

// The project's Markdown documents: every relative link resolves, and the
// README's first session runs as written against a running service.

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
)

// docFiles returns the Markdown documents whose links are checked, as
// paths relative to the module root: README.md, ARCHITECTURE.md,
// BENCHMARKS.md and every docs/*.md.
func docFiles(t testing.TB) []string {
	t.Helper()
	files := []string{"README.md", "ARCHITECTURE.md", "BENCHMARKS.md"}
	more, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(more) == 0 {
		t.Fatal("no docs/*.md: the reference documents are missing")
	}
	for _, m := range more {
		files = append(files, filepath.ToSlash(strings.TrimPrefix(m, ".."+string(filepath.Separator))))
	}
	return files
}

// mdLine is a line of a Markdown document outside fenced code blocks.
type mdLine struct {
	n    int // 1-based
	text string
}

// proseLines returns the lines of the Markdown file at path that are not
// inside a fenced code block (``` or ~~~), where neither headings nor links
// exist.
func proseLines(t testing.TB, path string) []mdLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []mdLine
	fence := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]) == "" {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		out = append(out, mdLine{n: n, text: line})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	// codeSpan is an inline code span (one or more backquotes), whose
	// contents are never a link.
	codeSpan = regexp.MustCompile("(`+)[^`]*?(`+)")
	// mdLink is an inline link or image: [text](target "title"); the text
	// may hold one level of brackets.
	mdLink = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	// atxHeading is an ATX heading line.
	atxHeading = regexp.MustCompile(`^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$`)
)

// headingSlugs returns the anchors GitHub gives the headings of the
// Markdown file at path: each heading's text lowercased, with everything
// but letters, digits, spaces, hyphens and underscores removed and spaces
// turned into hyphens; a repeated slug gets -1, -2, … as on GitHub.
func headingSlugs(t testing.TB, path string) map[string]bool {
	t.Helper()
	slugs := map[string]bool{}
	seen := map[string]int{}
	for _, l := range proseLines(t, path) {
		m := atxHeading.FindStringSubmatch(l.text)
		if m == nil {
			continue
		}
		s := githubSlug(m[2])
		if n := seen[s]; n > 0 {
			slugs[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			slugs[s] = true
		}
		seen[s]++
	}
	return slugs
}

// githubSlug is the anchor of a heading whose Markdown text is text: links
// become their text, emphasis and code markers go, then GitHub's rule
// (lowercase; keep letters, digits, '-', '_' and spaces; spaces become '-').
func githubSlug(text string) string {
	text = mdLink.ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// TestDocs_RelativeLinksResolve: every relative link in README.md,
// ARCHITECTURE.md, BENCHMARKS.md and docs/*.md names a file or directory
// of the repository, and its #anchor, if any, is a heading of the target
// Markdown file (GitHub's slug). Links to other sites are not followed.
func TestDocs_RelativeLinksResolve(t *testing.T) {
	t.Parallel()
	slugCache := map[string]map[string]bool{}
	slugsOf := func(path string) map[string]bool {
		if s, ok := slugCache[path]; ok {
			return s
		}
		s := headingSlugs(t, path)
		slugCache[path] = s
		return s
	}
	checked, anchors := 0, 0
	for _, doc := range docFiles(t) {
		path := filepath.Join("..", filepath.FromSlash(doc))
		for _, l := range proseLines(t, path) {
			for _, m := range mdLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(l.text, ""), -1) {
				target := m[2]
				if target == "" || regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`).MatchString(target) {
					continue // another site (https:, mailto:, …)
				}
				checked++
				where := fmt.Sprintf("%s:%d: link %q", doc, l.n, target)
				file, anchor, _ := strings.Cut(target, "#")
				dest := path
				if file != "" {
					if strings.HasPrefix(file, "/") {
						t.Errorf("%s: absolute path; link relative to the document", where)
						continue
					}
					dest = filepath.Join(filepath.Dir(path), filepath.FromSlash(file))
					if _, err := os.Stat(dest); err != nil {
						t.Errorf("%s: %s does not exist", where, filepath.ToSlash(strings.TrimPrefix(dest, ".."+string(filepath.Separator))))
						continue
					}
				}
				if anchor == "" {
					continue
				}
				anchors++
				if !strings.HasSuffix(dest, ".md") {
					t.Errorf("%s: an anchor into a file that is not Markdown", where)
					continue
				}
				if !slugsOf(dest)[anchor] {
					t.Errorf("%s: no heading of %s has the anchor #%s", where, filepath.Base(dest), anchor)
				}
			}
		}
	}
	// The README alone links to every docs file and to several sections:
	// far fewer would mean the parser missed them.
	if checked < 30 || anchors < 10 {
		t.Errorf("checked %d relative links, %d with an anchor; want at least 30 and 10 (is the link parser broken?)", checked, anchors)
	}
}

// docsSectionRef is a reference from code to a section of a reference
// document: docs/F.md followed by `, "Heading"`, ` ("Heading")`, `, Heading)`
// (an unquoted heading of capitalised words) or `#anchor`, after the
// comment markers of joined lines and Go's \" escapes were dropped.
var docsSectionRef = regexp.MustCompile(`docs/([a-z0-9-]+\.md)(?:(?:,\s*|\s+\()(?:"([^"]+)"|([A-Z][a-z][A-Za-z ]*)[),;])|#([a-z0-9_-]+))`)

// commentMarker is the start of a line of code up to its comment's text
// (Go's //, SQL's --, YAML's and the Makefile's #), dropped so a reference
// wrapped across comment lines reads as one phrase.
var commentMarker = regexp.MustCompile(`\n\s*(?://|--|#)?\s*`)

// TestDocs_SectionReferencesResolve: every reference from the code (Go,
// OpenAPI and other YAML, SQL migrations, the Makefile; tests aside) to a
// section of docs/F.md names a file that exists and a heading it has, so a
// message or comment that sends a reader to the reference finds it.
func TestDocs_SectionReferencesResolve(t *testing.T) {
	t.Parallel()
	checked := 0
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != ".." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		ext := filepath.Ext(name)
		if strings.HasSuffix(name, "_test.go") || (ext != ".go" && ext != ".yaml" && ext != ".yml" && ext != ".sql" && name != "Makefile") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		text := commentMarker.ReplaceAllString(strings.ReplaceAll(string(b), `\"`, `"`), " ")
		for _, m := range docsSectionRef.FindAllStringSubmatch(text, -1) {
			checked++
			doc := filepath.Join("..", "docs", m[1])
			where := fmt.Sprintf("%s: %q", filepath.ToSlash(strings.TrimPrefix(path, ".."+string(filepath.Separator))), m[0])
			if _, err := os.Stat(doc); err != nil {
				t.Errorf("%s: docs/%s does not exist", where, m[1])
				continue
			}
			anchor := m[4]
			if anchor == "" {
				anchor = githubSlug(m[2] + m[3])
			}
			if !headingSlugs(t, doc)[anchor] {
				t.Errorf("%s: docs/%s has no such heading (#%s)", where, m[1], anchor)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The server's messages, the OpenAPI description, a migration and the
	// deployment files name sections: far fewer would mean a broken parser.
	t.Logf("checked %d references", checked)
	if checked < 10 {
		t.Errorf("checked %d references to sections of docs/*.md, want at least 10 (is the parser broken?)", checked)
	}
}

// TestDocs_GitHubSlugs pins githubSlug to the anchors GitHub renders for
// headings of the kinds these documents use.
func TestDocs_GitHubSlugs(t *testing.T) {
	t.Parallel()
	for heading, want := range map[string]string{
		"The idempotency contract":                          "the-idempotency-contract",
		"Secrets at rest (crypto-shredding)":                "secrets-at-rest-crypto-shredding",
		"5. Background jobs":                                "5-background-jobs",
		"One log reader per process (`eventstore/fanout`)":  "one-log-reader-per-process-eventstorefanout",
		"HTTP API (v1) and the idempotency contract":        "http-api-v1-and-the-idempotency-contract",
		"What was run on this project's machines, and what": "what-was-run-on-this-projects-machines-and-what",
		"make test-stress":                                  "make-test-stress",
		"A first session — pasted":                          "a-first-session--pasted",
		"See [Payments](payments.md)":                       "see-payments",
	} {
		if got := githubSlug(heading); got != want {
			t.Errorf("githubSlug(%q) = %q, want %q", heading, got, want)
		}
	}
}

// firstSession returns the shell block of README.md's "A first session":
// the first ```sh fenced block under that heading, before the next heading.
func firstSession(t testing.TB) string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## A first session\n")
	if !ok {
		t.Fatal(`README.md has no "## A first session" section`)
	}
	if next := strings.Index(section, "\n## "); next >= 0 {
		section = section[:next]
	}
	_, block, ok := strings.Cut(section, "\n```sh\n")
	if !ok {
		t.Fatal("README.md's \"A first session\" has no ```sh block")
	}
	block, _, ok = strings.Cut(block, "\n```\n")
	if !ok {
		t.Fatal("README.md's first-session block does not end")
	}
	// A placeholder such as <id from the answer> is a shell syntax error
	// or a redirection, never a step that runs.
	if p := regexp.MustCompile(`<[a-z][^>]*>`).FindString(block); p != "" {
		t.Fatalf("README.md's first session has the placeholder %q: every step must run as written", p)
	}
	return block
}

// makeRunTokens returns the BOOKING_API_TOKENS that `make run` sets (the
// Makefile's default), which the first session uses.
func makeRunTokens(t testing.TB) string {
	t.Helper()
	mk, err := os.ReadFile(filepath.Join("..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^BOOKING_API_TOKENS \?= (\S+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile sets no BOOKING_API_TOKENS for make run")
	}
	return string(m[1])
}

// needTools skips the test when one of the commands names is not on PATH,
// except under CI=true, where a missing command fails it.
func needTools(t testing.TB, names ...string) {
	t.Helper()
	for _, name := range names {
		if _, err := exec.LookPath(name); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is not installed (CI=true: a missing tool is a failure; .ci/run installs it)", name)
			}
			t.Skipf("missing %s", name)
		}
	}
}

// TestReadme_FirstSessionRunsAsWritten runs the shell block of README.md's
// "A first session" with bash -euo pipefail against booking serve in dev
// mode with make run's tokens (API and SIM point the block at this
// server), then checks what it printed — the order confirmed with two
// tickets, its repeat replayed, the 422 and the 409, one charge refunded
// by the cancel, the intent's timeline — and what the service holds: one
// order, one charge netting 0 after the refund.
func TestReadme_FirstSessionRunsAsWritten(t *testing.T) {
	t.Parallel()
	needTools(t, "bash", "curl", "jq")
	block := firstSession(t)
	s := mustStart(t, Options{Env: map[string]string{
		// The harness's actors (the final audit reads the API as its
		// admin) and make run's, with the same names and roles.
		"BOOKING_API_TOKENS": apiTokens + "," + makeRunTokens(t),
	}})

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", block)
	cmd.Env = append(os.Environ(), "API="+s.URL, "SIM="+s.SimURL)
	cmd.Dir = t.TempDir()
	outb, err := cmd.CombinedOutput()
	out := string(outb)
	if err != nil {
		t.Fatalf("the first session failed (%v); it printed:\n%s", err, out)
	}
	t.Logf("the first session printed:\n%s", out)

	s.settle(t)
	orders := s.checkOrders(t, tokAlice, 1)
	if len(orders) != 1 {
		return
	}
	order := orders[0]
	if c := s.checkCharges(t, 1, 0); c.Net != 0 {
		t.Errorf("GET /_sim/charges: %s, want the one charge refunded in full by the cancel", c)
	}
	want := []struct{ what, re string }{
		{"step 1: the show's id", `(?m)^show [0-9a-f-]{36}$`},
		{"step 2: the reservation's id", `(?m)^reservation [0-9a-f-]{36}$`},
		{"step 3: the order confirmed with two tickets", `(?m)^\{"id":"` + order + `","status":"confirmed","tickets":2\}$`},
		{"step 4: the repeat answered 201", `(?m)^HTTP/1\.1 201 Created\r?$`},
		{"step 4: the repeat marked replayed", `(?mi)^Idempotent-Replayed: true\r?$`},
		{"step 4: the repeat's order", `"id":"` + order + `"`},
		{"step 5: 422 idempotency-key-reused naming the payment", `(?m)^\{"status":422,"code":"idempotency-key-reused","fields":\["payment"\]\}$`},
		{"step 6: 409 reservation-already-ordered naming the order", `(?m)^\{"status":409,"code":"reservation-already-ordered","order_id":"` + order + `"\}$`},
		{"step 7: one charge", `(?m)^\[\{"amount":9000,"status":"succeeded"\}\]$`},
		{"step 8: the order cancelled", `(?m)^\{"id":"` + order + `","status":"cancelled"\}$`},
		{"step 8: the charge refunded in full", `(?m)^\[\{"amount":9000,"refunded_amount":9000\}\]$`},
		{"step 9: the intent recorded", `(?m)^\S+ intent_recorded$`},
		{"step 9: the order confirmed", `(?m)^\S+ order_confirmed$`},
	}
	for _, w := range want {
		if !regexp.MustCompile(w.re).MatchString(out) {
			t.Errorf("the first session's output lacks %s (%s)", w.what, w.re)
		}
	}
	if slices.ContainsFunc(strings.Split(out, "\n"), func(l string) bool { return strings.TrimSpace(l) == "null" }) {
		t.Errorf("the first session printed null: a jq filter found no such member")
	}
}
