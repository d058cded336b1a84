// Command booking is the event-sourced ticket booking service whose promise
// is that retries are safe. See docs/cli.md for the commands and
// docs/configuration.md for their configuration.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/alecthomas/kong"

	"github.com/retrysafe/booking/cmd/booking/internal/config"
	"github.com/retrysafe/booking/cmd/booking/internal/configerr"
	"github.com/retrysafe/booking/cmd/booking/loadgen"
)

// version is the build's version. It is set with
// -ldflags '-X main.version=v1.2.3'; when empty, the module version recorded
// by the Go toolchain (runtime/debug.ReadBuildInfo) is used.
var version string

// revision is the VCS revision of a development build, set by `make build`
// with -ldflags '-X main.revision=<git rev-parse --short HEAD>[-dirty]'. The
// Go toolchain's own stamping (vcs.revision in the build information) is
// lost when GOFLAGS holds -buildvcs=false or git refuses the work tree, so
// the Makefile passes it itself; when empty, the build information's
// revision is used.
var revision string

// Exit statuses of the command, as the BSD sysexits and Go's own tools use
// them: 0 success, 1 a failure while running (for `booking loadgen`, a
// violation), 2 a usage or configuration error: a command line that could
// not be parsed (unknown command or flag, bad flag value or argument,
// missing command) or a missing or invalid configuration value (a
// *configerr.Error); 3 a `booking loadgen` run that broke no rule but was
// inconclusive (loadgen.ErrInconclusive).
const (
	exitFailure      = 1
	exitUsage        = 2
	exitInconclusive = 3
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "booking:", err)
		os.Exit(exitCode(err))
	}
}

// exitCode returns the exit status of a failed run: exitUsage for a command
// line that could not be parsed or a refused configuration value,
// exitInconclusive for an inconclusive load generator run, exitFailure
// otherwise.
func exitCode(err error) int {
	var u *usageError
	var c *configerr.Error
	switch {
	case errors.As(err, &u) || errors.As(err, &c):
		return exitUsage
	case errors.Is(err, loadgen.ErrInconclusive):
		return exitInconclusive
	}
	return exitFailure
}

// usageError is a command line that could not be parsed; main exits with
// status 2 for it.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// buildVersion returns the version set at link time (main.version), or the
// main module's version from the build information, or "(devel)" followed by
// the VCS revision when the build has one: main.revision set at link time,
// else the build information's vcs.revision (12 digits, "-dirty" when
// vcs.modified).
func buildVersion() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		if revision != "" {
			return "(devel) " + revision
		}
		return "(unknown)"
	}
	return moduleVersion(info, revision)
}

// moduleVersion is buildVersion's answer from the build information and
// the link-time revision (empty when not set).
func moduleVersion(info *debug.BuildInfo, revision string) string {
	v := info.Main.Version
	if v != "" && v != "(devel)" {
		return v
	}
	if revision != "" {
		return "(devel) " + revision
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision" && len(s.Value) >= 12:
			rev = s.Value[:12]
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "-dirty"
		}
	}
	if rev == "" {
		return "(devel)"
	}
	return "(devel) " + rev + dirty
}

// cli is the command line: one subcommand per kong command struct.
// Configuration comes from the environment; flags override it.
type cli struct {
	Version       kong.VersionFlag `help:"Print the version and exit."`
	Serve         serveCmd         `cmd:"" help:"Run the API and the workers (process manager, payments, recovery, projectors, relay)."`
	Migrate       migrateCmd       `cmd:"" help:"Apply the database migrations."`
	Projections   projectionsCmd   `cmd:"" help:"Manage read models."`
	Notifications notificationsCmd `cmd:"" help:"NATS notifications."`
	ProviderSim   providerSimCmd   `cmd:"" name:"provider-sim" help:"Run the payment provider simulator on its own."`
	Loadgen       loadgenCmd       `cmd:"" help:"Realistic clients with retries, timeouts and faults; prints a report."`
	Intents       intentsCmd       `cmd:"" help:"Operator views of intents (idempotency keys)."`
	Eventstore    eventstoreCmd    `cmd:"" name:"eventstore" help:"Move the event log between backends."`
}

// env carries what every command needs besides its flags.
type env struct {
	ctx     context.Context
	stdout  io.Writer
	stderr  io.Writer
	version string
	// warnings are reported once the command starts: on stderr, or
	// through its logger (env.logger).
	warnings []string
}

// errHelpShown is returned by run for a bare `booking`: the help went to
// stderr and the exit status is 2, as for any command line without a command.
var errHelpShown = &usageError{errors.New("no command given (see the list above)")}

// run parses args and runs the chosen command until it finishes or ctx is
// done. Errors name the flag or variable at fault; a command line that
// cannot be parsed is a *usageError, after the usage was written to stderr.
// A bare `booking` writes the help to stderr and returns errHelpShown.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c cli
	exitCode := -1
	v := buildVersion()
	parser, err := kong.New(&c,
		kong.Name("booking"),
		kong.Description("Event-sourced ticket booking where retries are safe."),
		kong.Writers(stdout, stderr),
		kong.Exit(func(code int) { exitCode = code }),
		kong.Vars{"version": "booking " + v},
	)
	if err != nil {
		return err
	}
	if len(args) == 0 {
		parser.Stdout = stderr
		if hctx, err := kong.Trace(parser, nil); err == nil {
			_ = hctx.PrintUsage(false)
		}
		return errHelpShown
	}
	kctx, err := parser.Parse(args)
	if exitCode >= 0 { // --help or --version
		if exitCode == 0 {
			return nil
		}
		return &usageError{errors.New("invalid command line")}
	}
	if err != nil {
		var pe *kong.ParseError
		if errors.As(err, &pe) && pe.Context != nil {
			if name, ok := unknownCommand(pe); ok {
				return &usageError{fmt.Errorf("unknown command %s; run %s --help", name, commandPath(pe.Context))}
			}
			err = withFlagNamed(pe.Context, missingValue(err)) // a Validate hook's refusal (serve)
			// A refused configuration value is answered with its message
			// alone; a command line kong could not parse, with where its
			// help is, so the message stays the one line a user reads.
			if ce := (*configerr.Error)(nil); !errors.As(err, &ce) {
				err = &renamedError{msg: err.Error() + "; run " + commandPath(pe.Context) + " --help", err: err}
			}
		}
		return &usageError{err}
	}
	if err := config.CheckRequirements(kctx); err != nil {
		return withFlagNamed(kctx, err)
	}
	e := &env{ctx: ctx, stdout: stdout, stderr: stderr, version: v,
		warnings: config.UnknownVariables(os.Environ(), config.KnownVariables(parser.Model.Node))}
	if !slices.ContainsFunc(kctx.Flags(), func(f *kong.Flag) bool { return f.Name == "log-format" }) {
		for _, w := range e.warnings { // a command with a logger logs them (env.logger)
			fmt.Fprintln(stderr, "booking: warning:", w)
		}
	}
	return withFlagNamed(kctx, kctx.Run(e))
}

// logger returns the logger of c on stderr (config.Log.Logger) after
// logging the start's warnings with it.
func (e *env) logger(c config.Log) (*slog.Logger, error) {
	log, err := c.Logger(e.stderr)
	if err != nil {
		return nil, err
	}
	for _, w := range e.warnings {
		log.Warn(w)
	}
	return log, nil
}

// withFlagNamed returns err with the command's flag added to the
// configuration error in its chain when that names an environment variable
// the flag reads: "--intent-lease (BOOKING_INTENT_LEASE): …", so the message
// names both ways of setting it. An error without a configuration error, or
// whose configuration error already names a flag or a variable no flag of
// the command reads, is returned as it is.
func withFlagNamed(kctx *kong.Context, err error) error {
	var ce *configerr.Error
	if kctx == nil || !errors.As(err, &ce) || strings.HasPrefix(ce.Variable, "-") {
		return err
	}
	for _, f := range kctx.Flags() {
		if f.Tag == nil || !slices.Contains(f.Tag.Envs, ce.Variable) {
			continue
		}
		before := ce.Error()
		ce.Variable = "--" + f.Name + " (" + ce.Variable + ")"
		if err == error(ce) {
			return err
		}
		// A wrapper formatted its message when it was made: rewrite it.
		return &renamedError{msg: strings.Replace(err.Error(), before, ce.Error(), 1), err: err}
	}
	return err
}

// renamedError is err with its message rewritten (withFlagNamed).
type renamedError struct {
	msg string
	err error
}

func (e *renamedError) Error() string { return e.msg }
func (e *renamedError) Unwrap() error { return e.err }

// missingValue rewrites kong's refusal of a flag given without its value:
// at the end of the line (`--key: expected string value but got "EOL"
// (<EOL>)`, or `--target: missing value, expecting …` for a list) it is
// `--key needs a value: --key=VALUE`; before a word that reads as a flag
// (`--clients -1`, `--key --actor`) the message adds that a value starting
// with "-" takes the = form (`--clients=-1`). Any other error is returned
// as it is.
func missingValue(err error) error {
	msg := err.Error()
	flag, rest, ok := strings.Cut(msg, ": ")
	if !ok || !strings.HasPrefix(flag, "-") {
		return err
	}
	need := flag + " needs a value: " + flag + "=VALUE"
	switch {
	case strings.HasPrefix(rest, "missing value, expecting "),
		strings.HasPrefix(rest, "expected ") && strings.HasSuffix(rest, `but got "EOL" (<EOL>)`):
		return &renamedError{msg: need, err: err}
	case strings.HasPrefix(rest, "expected ") && (strings.Contains(rest, `" (short flag)`) || strings.Contains(rest, `" (long flag)`)):
		_, got, _ := strings.Cut(rest, " but got ")
		got, _, _ = strings.Cut(got, " (")
		if word, err := strconv.Unquote(got); err == nil {
			need += fmt.Sprintf(" (%q reads as a flag: a value that starts with \"-\" takes the = form, %s=%s)", word, flag, word)
		}
		return &renamedError{msg: need, err: err}
	}
	return err
}

// unknownCommand reports whether pe is an argument where a command was
// expected (`booking frobnicate`, `booking projections frob`) and returns
// that argument quoted, with kong's suggestion. An extra argument after a
// complete command is not one.
func unknownCommand(pe *kong.ParseError) (string, bool) {
	rest, ok := strings.CutPrefix(pe.Error(), "unexpected argument ")
	if sel := pe.Context.Selected(); !ok || (sel != nil && len(sel.Children) == 0) {
		return "", false
	}
	name, hint, _ := strings.Cut(rest, ", ") // kong may add `did you mean "serve"?`
	return strings.TrimSuffix(strconv.Quote(name)+" ("+hint+")", " ()"), true
}

// commandPath is "booking" followed by the commands kctx has selected so
// far, such as "booking projections".
func commandPath(kctx *kong.Context) string {
	if sel := kctx.Selected(); sel != nil {
		return "booking " + sel.Path()
	}
	return "booking"
}
