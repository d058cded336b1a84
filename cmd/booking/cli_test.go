package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"

	"github.com/retrysafe/booking/cmd/booking/internal/config"
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

	stdout.Reset()
	if err := run(context.Background(), nil, &stdout, &stderr); err == nil || exitCode(err) != exitUsage || !strings.Contains(stderr.String(), "Commands:") {
		t.Errorf("bare booking = %v (exit %d), stderr %q; want a usage error (exit %d) after the help", err, exitCode(err), stderr.String(), exitUsage)
	}
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"an unknown flag", []string{"serve", "--no-such-flag"}, "unknown flag --no-such-flag; run booking serve --help"},
		{"a duration that does not parse", []string{"serve", "--intent-lease=soon"}, `--intent-lease: expected duration but got "soon"`},
	} {
		stdout.Reset()
		stderr.Reset()
		err := run(context.Background(), tt.args, &stdout, &stderr)
		if err == nil || exitCode(err) != exitUsage || !strings.Contains(err.Error(), tt.want) || !strings.HasSuffix(err.Error(), "; run booking serve --help") {
			t.Errorf("booking with %s = %v (exit %d), want a usage error (exit %d) with %q, ending with where the help is", tt.name, err, exitCode(err), exitUsage, tt.want)
		}
		if stderr.Len() != 0 {
			t.Errorf("booking with %s wrote to stderr %q, want nothing besides the error", tt.name, stderr.String())
		}
	}
	if got := exitCode(errors.New("database down")); got != exitFailure {
		t.Errorf("exitCode(a run-time failure) = %d, want %d", got, exitFailure)
	}
}

// TestUnknownCommand: an unknown command is a usage error (exit 2) whose
// message names it and points at --help, without the whole help.
func TestUnknownCommand(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, `unknown command "frobnicate"; run booking --help`},
		{[]string{"projections", "frob"}, `unknown command "frob"; run booking projections --help`},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), tt.args, &stdout, &stderr)
		if err == nil || err.Error() != tt.want || exitCode(err) != exitUsage {
			t.Errorf("booking %v = %v (exit %d), want %q (exit %d)", tt.args, err, exitCode(err), tt.want, exitUsage)
		}
		if stderr.Len() != 0 || stdout.Len() != 0 {
			t.Errorf("booking %v wrote stdout %q, stderr %q; want nothing besides the error", tt.args, stdout.String(), stderr.String())
		}
	}
}

// TestFlagWithoutValue: a flag given without its value is a usage error
// (exit 2) that names the flag and the form it wants: at the end of the
// line, for a list flag too, and before a word that reads as a flag, where
// it also says how to give a value that starts with "-".
func TestFlagWithoutValue(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"intents", "explain", "--actor", "alice", "--key"}, "--key needs a value: --key=VALUE; run booking intents explain --help"},
		{[]string{"loadgen", "--target"}, "--target needs a value: --target=VALUE; run booking loadgen --help"},
		{[]string{"intents", "explain", "--key", "--actor", "alice"},
			`--key needs a value: --key=VALUE ("--actor" reads as a flag: a value that starts with "-" takes the = form, --key=--actor); run booking intents explain --help`},
		{[]string{"loadgen", "--clients", "-1"},
			`--clients needs a value: --clients=VALUE ("-1" reads as a flag: a value that starts with "-" takes the = form, --clients=-1); run booking loadgen --help`},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), tt.args, &stdout, &stderr)
		if err == nil || err.Error() != tt.want || exitCode(err) != exitUsage {
			t.Errorf("booking %v = %v (exit %d), want %q (exit %d)", tt.args, err, exitCode(err), tt.want, exitUsage)
		}
	}
}

// TestUnreachableDatabaseIsNamed: every command that needs the database
// names DATABASE_URL when it cannot reach it, exits 1 (a failure while
// running, not a configuration error) and prints the dial error once.
func TestUnreachableDatabaseIsNamed(t *testing.T) {
	const url = "postgres://x@127.0.0.1:1/db?connect_timeout=5"
	t.Setenv("DATABASE_URL", url)
	t.Setenv("BOOKING_API_TOKENS", "a=x:admin,b=y")
	for _, v := range []string{"BOOKING_NATS_URL", "BOOKING_EVENT_STORE", "BOOKING_PROVIDER_URL"} {
		t.Setenv(v, "")
	}
	t.Setenv("BOOKING_DATA_DIR", t.TempDir())
	for _, args := range [][]string{
		{"migrate"},
		{"serve", "--http-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--nats-addr", "127.0.0.1:0", "--provider-sim-addr", "127.0.0.1:0"},
		{"projections", "rebuild"},
		{"notifications", "tail", "--nats-url", "nats://127.0.0.1:1"},
		{"intents", "explain", "--actor", "alice", "--key", "k"},
		{"loadgen", "--target", "http://127.0.0.1:1"},
		{"eventstore", "copy", "--from", "postgres", "--to", "esdb://127.0.0.1:1?tls=false"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), args, &stdout, &stderr)
		if err == nil || !strings.HasPrefix(err.Error(), "DATABASE_URL: ") || exitCode(err) != exitFailure {
			t.Errorf("booking %v = %v (exit %d), want an error starting DATABASE_URL:, exit %d", args, err, exitCode(err), exitFailure)
			continue
		}
		if n := strings.Count(err.Error(), "connection refused"); n != 1 {
			t.Errorf("booking %v = %q: the dial error %d times, want once", args, err, n)
		}
	}
}

// TestConfigurationErrorsExitTwo: a missing or invalid configuration value
// or a bad argument exits 2 in every command; a failure while running
// (such as a busy listen address) exits 1.
func TestConfigurationErrorsExitTwo(t *testing.T) {
	for _, v := range []string{"DATABASE_URL", "BOOKING_API_TOKENS", "BOOKING_NATS_URL", "BOOKING_EVENT_STORE"} {
		t.Setenv(v, "")
	}
	for _, tt := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"serve"}, "invalid configuration: --database-url (DATABASE_URL): required"},
		{[]string{"migrate"}, "invalid configuration: --database-url (DATABASE_URL): required"},
		{[]string{"notifications", "tail"}, "invalid configuration: --database-url (DATABASE_URL): required"},
		{[]string{"projections", "rebuild"}, "invalid configuration: --database-url (DATABASE_URL): required"},
		{[]string{"eventstore", "copy", "--from", "postgres", "--to", "esdb://h:1"}, "invalid configuration: --database-url (DATABASE_URL): required"},
		{[]string{"eventstore", "copy", "--database-url", "postgres://127.0.0.1:1/x", "--from", "bogus", "--to", "postgres"}, "invalid configuration: --from: must be postgres or a kurrentdb://"},
		{[]string{"eventstore", "copy", "--database-url", "postgres://127.0.0.1:1/x", "--from", "postgres", "--to", "postgres"}, "invalid configuration: --to: is a postgres event store like --from"},
		{[]string{"eventstore", "copy", "--database-url", "postgres://127.0.0.1:1/x", "--from", "postgres", "--to", "esdb://h:1", "--batch", "0"}, "invalid configuration: --batch"},
		{[]string{"serve", "--database-url", "postgres://127.0.0.1:1/x", "--api-tokens", "a=t", "--intent-lease=-5s"},
			"invalid configuration: --intent-lease (BOOKING_INTENT_LEASE): must be a positive duration"},
		{[]string{"provider-sim", "--retention=-1s"}, "invalid configuration: --retention (BOOKING_PROVIDER_RETENTION): must be a positive duration"},
		{[]string{"serve", "--database-url", "postgres://127.0.0.1:1/x", "--api-tokens", "a=t", "--nats-url=nats://a b"}, "invalid configuration: --nats-url (BOOKING_NATS_URL): want nats://host:port"},
		{[]string{"notifications", "tail", "--database-url", "postgres://127.0.0.1:1/x", "--nats-url=localhost"}, "invalid configuration: --nats-url (BOOKING_NATS_URL): want nats://host:port"},
		{[]string{"projections", "rebuild", "--database-url", "postgres://127.0.0.1:1/x", "bogus"}, `unknown read model "bogus"`},
		{[]string{"loadgen"}, "BOOKING_API_TOKENS"},
		{[]string{"loadgen", "--tokens", "a=x:admin,b=y", "--database-url", "postgres://%zz"}, "DATABASE_URL"},
		{[]string{"provider-sim", "--retention=-1s"}, "BOOKING_PROVIDER_RETENTION"},
		{[]string{"loadgen", "--tokens", "a=x:admin,b=y", "--target", "ftp://x"}, `--target: "ftp://x"`},
		{[]string{"intents", "explain", "--actor", "alice", "--key", ""}, "invalid configuration: --key: the Idempotency-Key must not be empty"},
		{[]string{"intents", "explain", "--actor=", "--key", "k"}, "invalid configuration: --actor: is empty; want the actor id, such as alice"},
		{[]string{"loadgen", "--tokens", "a=x:admin,b=y", "--url="}, "invalid configuration: --url: is empty"},
		{[]string{"intents", "explain", "--actor", "alice", "--key", "  "}, "--key: the Idempotency-Key must not be blank"},
		{[]string{"intents", "explain", "--actor", "alice", "--key", `"abc`}, "--key: the quoted Idempotency-Key lacks its closing quote"},
		{[]string{"intents", "explain", "--actor", "alice", "--key", strings.Repeat("k", 256)}, "--key: the Idempotency-Key must have at most 255 characters"},
		{[]string{"loadgen", "--tokens", "a=x:admin,b=y", "--show-size=-3"}, "--show-size: must be 0"},
		{[]string{"loadgen", "--tokens", "a=x:admin,b=y", "--late-wait=-1s"}, "--late-wait: must be positive"},
		{[]string{"loadgen", "--tokens", "a=x:admin,b=y", "--orders=0"}, "invalid configuration: --orders: must be at least 1"},
		{[]string{"loadgen", "--tokens", "a=x:admin,b=y", "--dup-rate=2"}, "--dup-rate: must be between 0 and 1"},
		{[]string{"loadgen", "--tokens", "a=x:admin,b=y", "--retry-budget-rate=-1"}, "--retry-budget-rate (BOOKING_RETRY_BUDGET_RATE): must be positive"},
		{[]string{"loadgen", "--tokens", "a=x:admin,b=y", "--payment-lease=-1s"}, "--payment-lease (BOOKING_PAYMENT_LEASE): must be positive"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), tt.args, &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) || exitCode(err) != exitUsage {
			t.Errorf("booking %v = %v (exit %d), want an error containing %q, exit %d", tt.args, err, exitCode(err), tt.wantErr, exitUsage)
		}
	}

	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	_, err = net.Listen("tcp", addr)
	if err == nil {
		t.Fatal("a second listener on a busy address succeeded")
	}
	lerr := config.ListenError(addr, "BOOKING_HTTP_ADDR", err)
	if got, want := lerr.Error(), "cannot listen on "+addr+" (BOOKING_HTTP_ADDR): address already in use"; got != want {
		t.Errorf("listenError = %q, want %q", got, want)
	}
	if got := exitCode(lerr); got != exitFailure {
		t.Errorf("exitCode(a busy listen address) = %d, want %d", got, exitFailure)
	}
	var stdout, stderr bytes.Buffer
	err = run(context.Background(), []string{"provider-sim", "--addr", addr}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "cannot listen on "+addr+" (BOOKING_PROVIDER_SIM_ADDR): address already in use") || exitCode(err) != exitFailure {
		t.Errorf("provider-sim on a busy address = %v (exit %d), want cannot listen…, exit %d", err, exitCode(err), exitFailure)
	}
	if strings.Contains(stdout.String(), "provider simulator on") {
		t.Errorf("provider-sim on a busy address printed %q", stdout.String())
	}
}

// TestListenAddressErrorsExitTwo: a listen address whose port does not
// parse (not a number 0–65535 nor a service name) is a configuration error
// of every address variable: exit 2 with a message naming the variable,
// before anything connects or listens, instead of exit 1 at listen.
func TestListenAddressErrorsExitTwo(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://127.0.0.1:1/never-connected")
	t.Setenv("BOOKING_API_TOKENS", "alice=tok-alice")
	t.Setenv("BOOKING_NATS_URL", "")
	t.Setenv("BOOKING_PROVIDER_URL", "")
	t.Setenv("BOOKING_EVENT_STORE", "postgres")
	t.Setenv("BOOKING_DATA_DIR", t.TempDir()) // where a serve that went on would write its dev master key
	for _, tt := range []struct {
		variable, value string
		args            []string
		wantErr         string
	}{
		{"BOOKING_HTTP_ADDR", "127.0.0.1:http0", []string{"serve"}, `--http-addr (BOOKING_HTTP_ADDR): "http0" is not a port`},
		{"BOOKING_HTTP_ADDR", "127.0.0.1", []string{"serve"}, "--http-addr (BOOKING_HTTP_ADDR): must be host:port"},
		{"BOOKING_ADMIN_ADDR", "localhost:99999", []string{"serve"}, `--admin-addr (BOOKING_ADMIN_ADDR): "99999" is not a port`},
		{"BOOKING_NATS_ADDR", "127.0.0.1:4222x", []string{"serve"}, `--nats-addr (BOOKING_NATS_ADDR): "4222x" is not a port`},
		{"BOOKING_PROVIDER_SIM_ADDR", "127.0.0.1:-1", []string{"serve"}, `--provider-sim-addr (BOOKING_PROVIDER_SIM_ADDR): "-1" is not a port`},
		{"BOOKING_PROVIDER_SIM_ADDR", "[::1]:65536", []string{"provider-sim"}, `--addr (BOOKING_PROVIDER_SIM_ADDR): "65536" is not a port`},
	} {
		t.Run(tt.variable+"="+tt.value, func(t *testing.T) {
			t.Setenv(tt.variable, tt.value)
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tt.args, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), "invalid configuration: "+tt.wantErr) || exitCode(err) != exitUsage {
				t.Errorf("booking %v with %s=%s = %v (exit %d), want an error containing %q, exit %d",
					tt.args, tt.variable, tt.value, err, exitCode(err), "invalid configuration: "+tt.wantErr, exitUsage)
			}
		})
	}
}

// TestBuildVersion: the link-time revision (make build's -X main.revision)
// follows "(devel)"; without it, the build information's vcs.revision
// (12 digits, -dirty when modified); a module version wins over both.
func TestBuildVersion(t *testing.T) {
	t.Parallel()
	devel := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}
	stamped := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}
	released := &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}
	for _, tt := range []struct {
		info     *debug.BuildInfo
		revision string
		want     string
	}{
		{devel, "22b4e86-dirty", "(devel) 22b4e86-dirty"},
		{devel, "", "(devel)"},
		{stamped, "", "(devel) 0123456789ab-dirty"},
		{stamped, "22b4e86", "(devel) 22b4e86"},
		{released, "22b4e86", "v1.2.3"},
	} {
		if got := moduleVersion(tt.info, tt.revision); got != tt.want {
			t.Errorf("moduleVersion(%v, %q) = %q, want %q", tt.info.Main.Version, tt.revision, got, tt.want)
		}
	}
}

// TestMakeBuildStampsRevision: `make build` (and so make run and make
// chaos) links the work tree's revision into main.revision, so `booking
// --version` and booking_build_info show it even where the toolchain's VCS
// stamping is off (GOFLAGS=-buildvcs=false).
func TestMakeBuildStampsRevision(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	out, err := exec.Command("make", "-C", "../..", "-n", "build").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n build: %v\n%s", err, out)
	}
	rev, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git work tree: %v", err)
	}
	want := regexp.MustCompile(`-X main\.revision=` + strings.TrimSpace(string(rev)) + `(-dirty)?\b`)
	if !want.Match(out) {
		t.Errorf("make -n build = %q, want it to link %s", out, want)
	}
}

// TestServeHelpVariablesInConfigurationDoc: every environment variable that
// `booking serve --help` lists is documented in docs/configuration.md.
func TestServeHelpVariablesInConfigurationDoc(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"serve", "--help"}, &stdout, &stderr); err != nil {
		t.Fatalf("serve --help: %v", err)
	}
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	vars := regexp.MustCompile(`\$([A-Z][A-Z0-9_]*)`).FindAllStringSubmatch(stdout.String(), -1)
	if len(vars) < 20 {
		t.Fatalf("booking serve --help names %d variables, want the whole configuration:\n%s", len(vars), stdout.String())
	}
	// The table documents a secret's _FILE twin on the same line as
	// "`VAR`, `_FILE`".
	for _, v := range vars {
		name := v[1]
		if strings.Contains(string(doc), "`"+name+"`") {
			continue
		}
		if base, ok := strings.CutSuffix(name, "_FILE"); ok && strings.Contains(string(doc), "`"+base+"`, `_FILE`") {
			continue
		}
		t.Errorf("booking serve --help lists %s, which docs/configuration.md does not document", name)
	}
}

// TestMakeRunWebhookSecret: the webhook secret `make run` uses is the dev
// default docs/configuration.md documents and `booking serve` falls back to.
func TestMakeRunWebhookSecret(t *testing.T) {
	t.Parallel()
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^BOOKING_PROVIDER_WEBHOOK_SECRET \?= (\S+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile sets no BOOKING_PROVIDER_WEBHOOK_SECRET for make run")
	}
	if got := string(m[1]); got != config.DevWebhookSecret {
		t.Errorf("make run's BOOKING_PROVIDER_WEBHOOK_SECRET = %q, want the dev default %q", got, config.DevWebhookSecret)
	}
	row := regexp.MustCompile("(?m)^\\| `BOOKING_PROVIDER_WEBHOOK_SECRET` \\| `([^`]+)`").FindSubmatch(doc)
	if row == nil || !slices.Equal(row[1], m[1]) {
		t.Errorf("docs/configuration.md's default of BOOKING_PROVIDER_WEBHOOK_SECRET = %q, want make run's %q", row, m[1])
	}
}

// TestMakeHelpListsEveryVariable: `make help` lists, one line each with a
// description and the value in effect, every variable the Makefile lets a
// user override (`VAR ?= …`), and the two it reads from the environment
// (GOFLAGS, DATABASE_URL). Skipped where make is not installed.
func TestMakeHelpListsEveryVariable(t *testing.T) {
	t.Parallel()
	makePath, err := exec.LookPath("make")
	if err != nil {
		t.Skip("make is not installed")
	}
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(makePath, "-s", "help")
	cmd.Dir = "../.."
	// Run as a top-level make: a `make test` around this test would pass
	// its own flags and variables through MAKEFLAGS.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return name == "MAKEFLAGS" || name == "MFLAGS" || name == "MAKELEVEL" || name == "MAKEOVERRIDES"
	})
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make help: %v\n%s", err, stderr.String())
	}
	want := []string{"GOFLAGS", "DATABASE_URL"}
	for _, m := range regexp.MustCompile(`(?m)^([A-Za-z_][A-Za-z0-9_]*)[ \t]*\?=`).FindAllSubmatch(mk, -1) {
		want = append(want, string(m[1]))
	}
	if len(want) < 20 {
		t.Fatalf("found %d overridable variables in the Makefile, want them all: %q", len(want), want)
	}
	for _, name := range want {
		line := regexp.MustCompile(`(?m)^  ` + name + ` +\S.* \[.*\]$`)
		if !line.Match(out) {
			t.Errorf("make help has no line for %s (want \"  %s  description [value]\")", name, name)
		}
	}
	if t.Failed() {
		t.Logf("make help printed:\n%s", out)
	}
}

// leafCommands returns the command paths of the command line ("serve",
// "projections rebuild", ...) with their nodes.
func leafCommands(t *testing.T) map[string]*kong.Node {
	t.Helper()
	var c cli
	parser, err := kong.New(&c, kong.Name("booking"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*kong.Node{}
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		if n.Type == kong.CommandNode && len(n.Children) == 0 {
			out[n.Path()] = n
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(parser.Model.Node)
	return out
}

// TestEveryCommandExitsTwoNamingFlagAndVariable: every command of the
// command line (walked from its model, so a new command is covered) exits
// 2 with a message naming the flag and its variable for a DATABASE_URL that
// is not a URL or names another database, for an unknown flag, and for a
// variable whose value does not parse; nothing connects.
func TestEveryCommandExitsTwoNamingFlagAndVariable(t *testing.T) {
	t.Setenv("BOOKING_API_TOKENS", "a=x:admin,b=y")
	t.Setenv("BOOKING_DATA_DIR", t.TempDir())
	for _, v := range []string{"BOOKING_NATS_URL", "BOOKING_EVENT_STORE", "BOOKING_PROVIDER_URL"} {
		t.Setenv(v, "")
	}
	cmds := leafCommands(t)
	if len(cmds) < 7 {
		t.Fatalf("found %d commands, want every one: %v", len(cmds), cmds)
	}
	withDatabase := 0
	for path, n := range cmds {
		args := strings.Fields(path)
		var valued *kong.Flag // a flag with a variable whose value must parse (a number or a duration)
		hasDatabase := false
		for _, f := range n.Flags {
			if f.Required {
				args = append(args, "--"+f.Name+"=x")
			}
			if f.Name == "database-url" {
				hasDatabase = true
			}
			if k := f.Target.Kind(); valued == nil && f.Tag != nil && len(f.Tag.Envs) > 0 && k >= reflect.Int && k <= reflect.Float64 {
				valued = f
			}
		}
		t.Logf("booking %s: args %q, database %v, valued %v", path, args, hasDatabase, valued != nil)
		check := func(what string, args []string, want ...string) {
			t.Helper()
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), args, &stdout, &stderr)
			if err == nil || exitCode(err) != exitUsage {
				t.Errorf("booking %s with %s = %v (exit %d), want exit %d", path, what, err, exitCode(err), exitUsage)
				return
			}
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("booking %s with %s = %q, want it to name %s", path, what, err, w)
				}
			}
		}
		if hasDatabase {
			withDatabase++
			for _, bad := range []string{"not a url", "mysql://u:secret@db.example/booking", "postgres://u:secret@h:port/db"} {
				t.Setenv("DATABASE_URL", bad)
				check("DATABASE_URL="+bad, args, "--database-url (DATABASE_URL)", "postgres://")
				var stdout, stderr bytes.Buffer
				if err := run(context.Background(), args, &stdout, &stderr); err != nil && strings.Contains(err.Error(), "secret") {
					t.Errorf("booking %s with DATABASE_URL=%s = %q: shows the password", path, bad, err)
				}
			}
		}
		t.Setenv("DATABASE_URL", "postgres://127.0.0.1:1/never-connected")
		check("an unknown flag", append(slices.Clone(args), "--no-such-flag"), "--no-such-flag")
		if valued != nil {
			v := valued.Tag.Envs[0]
			t.Setenv(v, "soon")
			check(v+"=soon", args, "--"+valued.Name, v)
			os.Unsetenv(v)
		}
	}
	if withDatabase < 5 {
		t.Errorf("%d commands have --database-url, want at least 5 (serve, migrate, projections rebuild, notifications tail, intents explain, loadgen)", withDatabase)
	}
}

// TestUnknownVariablesAreReported: a BOOKING_* variable no command reads
// is reported at start with the nearest known name (a warning: the
// command still runs); BOOKING_TEST_* is the test build's and never is.
func TestUnknownVariablesAreReported(t *testing.T) {
	t.Setenv("BOOKING_API_TOKEN", "secret-value")
	t.Setenv("BOOKING_TEST_ANYTHING", "1")
	t.Setenv("DATABASE_URL", "")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"migrate"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "DATABASE_URL") {
		t.Fatalf("migrate = %v, want the missing DATABASE_URL", err)
	}
	want := "booking: warning: BOOKING_API_TOKEN is set but no booking command reads it; did you mean BOOKING_API_TOKENS?\n"
	if got := stderr.String(); got != want {
		t.Errorf("stderr = %q, want %q", got, want)
	}
	known := config.KnownVariables(func() *kong.Node {
		p, err := kong.New(&cli{})
		if err != nil {
			t.Fatal(err)
		}
		return p.Model.Node
	}())
	for _, v := range []string{"BOOKING_AUTH", "BOOKING_JWKS_URL", "BOOKING_PROVIDER_SIM_API_KEY", "BOOKING_LOADGEN_URL", "DATABASE_URL"} {
		if !slices.Contains(known, v) {
			t.Errorf("KnownVariables lacks %s: %v", v, known)
		}
	}
	for _, tt := range []struct{ name, want string }{
		{"BOOKING_JWT_ISUER", "BOOKING_JWT_ISSUER"}, {"BOOKING_PROVIDR_URL", "BOOKING_PROVIDER_URL"}, {"BOOKING_LOGLEVEL", "BOOKING_LOG_LEVEL"},
	} {
		got := config.UnknownVariables([]string{tt.name + "=v"}, known)
		if len(got) != 1 || !strings.HasSuffix(got[0], "did you mean "+tt.want+"?") {
			t.Errorf("config.UnknownVariables(%s) = %q, want the nearest %s", tt.name, got, tt.want)
		}
	}
	if got := config.UnknownVariables([]string{"BOOKING_PPROF_ADDR=127.0.0.1:6060"}, known); len(got) != 1 ||
		!strings.Contains(got[0], "replaced by BOOKING_ADMIN_ADDR") || strings.Contains(got[0], "6060") {
		t.Errorf("config.UnknownVariables(BOOKING_PPROF_ADDR) = %q, want it named replaced by BOOKING_ADMIN_ADDR, without its value", got)
	}
}

// TestProviderKeysAndSecrets: booking serve with Stripe's secret key
// (Stripe's API) and no webhook secret refuses to start (exit 2), naming
// the variable and its flag; with it, it goes on; a simulator URL alone
// (no key at all) goes on too.
func TestProviderKeysAndSecrets(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://127.0.0.1:1/never-connected?connect_timeout=5")
	t.Setenv("BOOKING_API_TOKENS", "a=x:admin")
	t.Setenv("BOOKING_MASTER_KEYS", "k1:"+strings.Repeat("A", 43)+"=")
	t.Setenv("BOOKING_NATS_URL", "")
	t.Setenv("BOOKING_EVENT_STORE", "")
	t.Setenv("BOOKING_DATA_DIR", t.TempDir())
	for _, v := range []string{"BOOKING_PROVIDER_API_KEY", "BOOKING_PROVIDER_API_KEY_FILE", "BOOKING_STRIPE_SECRET_KEY_FILE",
		"BOOKING_PROVIDER_URL", "BOOKING_PROVIDER_WEBHOOK_SECRET"} {
		t.Setenv(v, "")
	}
	t.Setenv("BOOKING_STRIPE_SECRET_KEY", "sk_test_1")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"serve"}, &stdout, &stderr)
	want := "invalid configuration: --provider-webhook-secret (BOOKING_PROVIDER_WEBHOOK_SECRET): required"
	if err == nil || !strings.Contains(err.Error(), want) || exitCode(err) != exitUsage || strings.Contains(err.Error(), "sk_test_1") {
		t.Errorf("serve with Stripe's key and no webhook secret = %v (exit %d), want %q, exit %d", err, exitCode(err), want, exitUsage)
	}
	t.Setenv("BOOKING_PROVIDER_WEBHOOK_SECRET", "whsec_x")
	err = run(context.Background(), []string{"serve"}, &stdout, &stderr)
	if err == nil || !strings.HasPrefix(err.Error(), "DATABASE_URL: ") {
		t.Errorf("serve with the key and the webhook secret = %v, want it to go on to the (unreachable) database", err)
	}
	t.Setenv("BOOKING_STRIPE_SECRET_KEY", "")
	t.Setenv("BOOKING_PROVIDER_URL", "http://127.0.0.1:8090")
	err = run(context.Background(), []string{"serve"}, &stdout, &stderr)
	if err == nil || !strings.HasPrefix(err.Error(), "DATABASE_URL: ") {
		t.Errorf("serve with a simulator URL and no key = %v, want it to go on to the (unreachable) database", err)
	}
}

// TestEveryNumericFlagRefusesOutOfRange: every number and duration flag of
// every command (walked from the command line's model, so a new flag is
// covered) refuses a negative value, and every number flag NaN and
// infinity, before anything runs: exit 2 with a message naming that flag.
// A value accepted there would reach the unreachable database (exit 1), a
// simulator that starts (it is stopped by the context), or run with a
// window, timeout or rate that cannot be meant.
func TestEveryNumericFlagRefusesOutOfRange(t *testing.T) {
	t.Setenv("BOOKING_API_TOKENS", "a=x:admin,b=y")
	t.Setenv("BOOKING_DATA_DIR", t.TempDir())
	t.Setenv("DATABASE_URL", "postgres://127.0.0.1:1/never-connected")
	for _, v := range []string{"BOOKING_NATS_URL", "BOOKING_EVENT_STORE", "BOOKING_PROVIDER_URL"} {
		t.Setenv(v, "")
	}
	durationType := reflect.TypeFor[time.Duration]()
	checked := 0
	for path, n := range leafCommands(t) {
		base := strings.Fields(path)
		for _, f := range n.Flags {
			if f.Required {
				base = append(base, "--"+f.Name+"=x")
			}
		}
		switch path { // what the command needs besides
		case "provider-sim":
			base = append(base, "--addr=127.0.0.1:0")
		case "notifications tail":
			base = append(base, "--nats-url=nats://127.0.0.1:1")
		case "eventstore copy":
			base = append(base, "--from=postgres", "--to=esdb://127.0.0.1:1")
		}
		for _, f := range n.Flags {
			k := f.Target.Kind()
			if k < reflect.Int || k > reflect.Float64 {
				continue
			}
			bad := []string{"-1"}
			switch {
			case f.Target.Type() == durationType:
				bad = []string{"-1s"}
			case k == reflect.Float32 || k == reflect.Float64:
				bad = append(bad, "NaN", "+Inf")
			}
			for _, v := range bad {
				checked++
				args := append(slices.Clone(base), "--"+f.Name+"="+v)
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				var stdout, stderr bytes.Buffer
				err := run(ctx, args, &stdout, &stderr)
				cancel()
				if err == nil || exitCode(err) != exitUsage || !strings.Contains(err.Error(), "--"+f.Name) {
					t.Errorf("booking %s --%s=%s = %v (exit %d), want exit %d naming --%s", path, f.Name, v, err, exitCode(err), exitUsage, f.Name)
				}
			}
		}
	}
	if checked < 40 {
		t.Errorf("checked %d values, want the number and duration flags of every command (at least 40)", checked)
	}
}

// TestProviderSimRefusesABadWebhookURL: `booking provider-sim` with a
// webhook URL that is not an http(s) URL exits 2 naming it, instead of
// serving and never delivering a webhook.
func TestProviderSimRefusesABadWebhookURL(t *testing.T) {
	t.Setenv("BOOKING_DATA_DIR", "")
	for _, bad := range []string{"notaurl", "ftp://x/hooks", "http://"} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		var stdout, stderr bytes.Buffer
		err := run(ctx, []string{"provider-sim", "--addr=127.0.0.1:0", "--webhook-url=" + bad}, &stdout, &stderr)
		cancel()
		if err == nil || exitCode(err) != exitUsage || !strings.Contains(err.Error(), "--webhook-url (BOOKING_PROVIDER_WEBHOOK_URL)") {
			t.Errorf("booking provider-sim --webhook-url=%s = %v (exit %d), want exit %d naming --webhook-url (BOOKING_PROVIDER_WEBHOOK_URL)", bad, err, exitCode(err), exitUsage)
		}
		if strings.Contains(stdout.String(), "provider simulator on") {
			t.Errorf("booking provider-sim --webhook-url=%s started: %q", bad, stdout.String())
		}
	}
}
