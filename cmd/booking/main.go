// Command booking is the event-sourced ticket booking service whose promise
// is that retries are safe. See the README for the commands and their
// configuration.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kong"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "booking:", err)
		os.Exit(1)
	}
}

// cli is the command line: one subcommand per kong command struct.
// Configuration comes from the environment; flags override it.
type cli struct {
	Serve         serveCmd         `cmd:"" help:"Run the API and the workers (process manager, payments, recovery, projectors, relay)."`
	Migrate       migrateCmd       `cmd:"" help:"Apply the database migrations."`
	Projections   projectionsCmd   `cmd:"" help:"Manage read models."`
	Notifications notificationsCmd `cmd:"" help:"NATS notifications."`
	ProviderSim   providerSimCmd   `cmd:"" name:"provider-sim" help:"Run the payment provider simulator on its own."`
	Loadgen       loadgenCmd       `cmd:"" help:"Realistic clients with retries, timeouts and faults; prints a report."`
}

// env carries what every command needs besides its flags.
type env struct {
	ctx    context.Context
	stdout io.Writer
	stderr io.Writer
}

// run parses args and runs the chosen command until it finishes or ctx is
// done. Errors name the flag or variable at fault.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c cli
	exitCode := -1
	parser, err := kong.New(&c,
		kong.Name("booking"),
		kong.Description("Event-sourced ticket booking where retries are safe."),
		kong.Writers(stdout, stderr),
		kong.Exit(func(code int) { exitCode = code }),
		kong.UsageOnError(),
	)
	if err != nil {
		return err
	}
	kctx, err := parser.Parse(args)
	if exitCode >= 0 { // --help
		if exitCode == 0 {
			return nil
		}
		return errors.New("invalid command line")
	}
	if err != nil {
		return err
	}
	return kctx.Run(&env{ctx: ctx, stdout: stdout, stderr: stderr})
}
