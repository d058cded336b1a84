// Command kurrentdb-double runs the KurrentDB server double of package
// kurrentdbtest as its own process, for end-to-end tests that run the
// service against "KurrentDB" where no real server can be installed.
//
//	kurrentdb-double -listen 127.0.0.1:2113 -data /tmp/kdb.log
//
// It prints "listening on HOST:PORT" and the connection string on stdout
// once it accepts connections, and runs until SIGINT or SIGTERM. With -data
// the log is kept in that file and survives a restart of the process (kill
// it and start it again with the same file): the way to test a KurrentDB
// restart from outside. Connection strings: esdb://HOST:PORT?tls=false.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/retrysafe/booking/eventstore/kurrentdb/kurrentdbtest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "kurrentdb-double:", err)
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("kurrentdb-double", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:2113", "host:port to listen on (port 0 picks a free one)")
	data := fs.String("data", "", "file that keeps the log across restarts (empty: memory only)")
	writeTimeout := fs.Duration("write-timeout", kurrentdbtest.DefaultWriteTimeout, "how long a write waits to commit before it is answered Aborted")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *writeTimeout <= 0 {
		return errors.New("-write-timeout must be positive")
	}
	srv, err := kurrentdbtest.Start(*listen, kurrentdbtest.Options{DataFile: *data, WriteTimeout: *writeTimeout, Now: time.Now})
	if err != nil {
		return err
	}
	defer srv.Stop()
	fmt.Fprintf(stdout, "listening on %s\n%s\n", srv.Addr(), srv.URL())
	<-ctx.Done()
	return nil
}
