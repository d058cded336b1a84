package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestCommandLine: --version prints the build's version and exits 0; a bare
// `booking` prints the help to stderr and is a usage error (exit 2), like an
// unknown command, an unknown flag or a value that does not parse.
func TestCommandLine(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"--version"}, &stdout, &stderr); err != nil {
		t.Fatalf("booking --version = %v, want nil", err)
	}
	if got, want := stdout.String(), "booking "+buildVersion()+"\n"; got != want || buildVersion() == "" {
		t.Errorf("booking --version printed %q, want %q", got, want)
	}

	for _, tt := range []struct {
		name       string
		args       []string
		wantStderr string
	}{
		{"bare booking", nil, "Commands:"},
		{"an unknown command", []string{"frobnicate"}, "Usage: booking"},
		{"an unknown flag", []string{"serve", "--no-such-flag"}, "Usage: booking serve"},
		{"a duration that does not parse", []string{"serve", "--intent-lease=soon"}, "Usage: booking serve"},
	} {
		stdout.Reset()
		stderr.Reset()
		err := run(context.Background(), tt.args, &stdout, &stderr)
		if err == nil || exitCode(err) != exitUsage {
			t.Errorf("booking with %s = %v (exit %d), want a usage error (exit %d)", tt.name, err, exitCode(err), exitUsage)
		}
		if !strings.Contains(stderr.String(), tt.wantStderr) {
			t.Errorf("booking with %s wrote to stderr %q, want it to contain %q", tt.name, stderr.String(), tt.wantStderr)
		}
	}
	if got := exitCode(errors.New("database down")); got != exitFailure {
		t.Errorf("exitCode(a run-time failure) = %d, want %d", got, exitFailure)
	}
}

// TestServeHelpVariablesInREADME: every environment variable that `booking
// serve --help` lists is documented in the README.
func TestServeHelpVariablesInREADME(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"serve", "--help"}, &stdout, &stderr); err != nil {
		t.Fatalf("serve --help: %v", err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	vars := regexp.MustCompile(`\$([A-Z][A-Z0-9_]*)`).FindAllStringSubmatch(stdout.String(), -1)
	if len(vars) < 20 {
		t.Fatalf("booking serve --help names %d variables, want the whole configuration:\n%s", len(vars), stdout.String())
	}
	// The README documents a secret's _FILE twin on the same line as
	// "`VAR`, `_FILE`".
	for _, v := range vars {
		name := v[1]
		if strings.Contains(string(readme), "`"+name+"`") {
			continue
		}
		if base, ok := strings.CutSuffix(name, "_FILE"); ok && strings.Contains(string(readme), "`"+base+"`, `_FILE`") {
			continue
		}
		t.Errorf("booking serve --help lists %s, which README.md does not document", name)
	}
}

// TestMakeRunWebhookSecret: the webhook secret `make run` uses is the dev
// default the README documents and `booking serve` falls back to.
func TestMakeRunWebhookSecret(t *testing.T) {
	t.Parallel()
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^BOOKING_PROVIDER_WEBHOOK_SECRET \?= (\S+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile sets no BOOKING_PROVIDER_WEBHOOK_SECRET for make run")
	}
	if got := string(m[1]); got != devWebhookSecret {
		t.Errorf("make run's BOOKING_PROVIDER_WEBHOOK_SECRET = %q, want the dev default %q", got, devWebhookSecret)
	}
	row := regexp.MustCompile("(?m)^\\| `BOOKING_PROVIDER_WEBHOOK_SECRET` \\| `([^`]+)`").FindSubmatch(readme)
	if row == nil || !slices.Equal(row[1], m[1]) {
		t.Errorf("README's default of BOOKING_PROVIDER_WEBHOOK_SECRET = %q, want make run's %q", row, m[1])
	}
}
