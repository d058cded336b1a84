// Command cpuhog runs a command while busy loops keep every CPU core busy,
// so that tests meet the load of a shared, fully busy machine on purpose
// (`make test-stress`).
//
// Usage:
//
//	go run ./test/cpuhog [-workers N] -- COMMAND [ARGS...]
//
// It starts N busy goroutines (default: the number of CPUs), each on its own
// OS thread at normal priority, runs COMMAND with the same standard streams
// and environment, forwards SIGINT and SIGTERM to it, stops the loops when it
// exits and exits with its status (128+signal if a signal ended it).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"sync/atomic"
	"syscall"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("cpuhog", flag.ContinueOnError)
	workers := fs.Int("workers", runtime.NumCPU(), "number of busy loops (one per core keeps the machine fully busy)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cmdArgs := fs.Args()
	if len(cmdArgs) == 0 {
		fmt.Fprintln(os.Stderr, "cpuhog: usage: cpuhog [-workers N] -- COMMAND [ARGS...]")
		return 2
	}
	if *workers < 0 {
		fmt.Fprintln(os.Stderr, "cpuhog: -workers must be ≥ 0")
		return 2
	}
	if runtime.GOMAXPROCS(0) < *workers {
		runtime.GOMAXPROCS(*workers)
	}

	var stop atomic.Bool
	var sink atomic.Uint64
	for range *workers {
		go func() {
			runtime.LockOSThread()
			var x uint64 = 88172645463325252
			for !stop.Load() {
				for range 1 << 16 { // xorshift: work the compiler cannot drop
					x ^= x << 13
					x ^= x >> 7
					x ^= x << 17
				}
			}
			sink.Add(x)
		}()
	}
	fmt.Fprintf(os.Stderr, "cpuhog: %d busy loop(s) on %d CPU(s) while running %v\n", *workers, runtime.NumCPU(), cmdArgs)

	cmd := exec.Command(cmdArgs[0], cmdArgs[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "cpuhog: %v\n", err)
		return 127
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err := cmd.Wait()
	stop.Store(true)
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	fmt.Fprintf(os.Stderr, "cpuhog: %v\n", err)
	return 1
}
