package kurrentdbtest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// commandPath is the import path of the double's command.
const commandPath = "github.com/retrysafe/booking/eventstore/kurrentdb/kurrentdbtest/cmd/kurrentdb-double"

// BuildCommand builds cmd/kurrentdb-double into tb's temporary directory
// and returns the binary's path (see Build). It fails tb if the build fails.
func BuildCommand(tb testing.TB) string {
	tb.Helper()
	bin, err := Build(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	return bin
}

// Build builds cmd/kurrentdb-double into dir with the go tool and returns
// the binary's path. It builds with the race detector if the calling binary
// has it, so the packages compiled for the test are reused and only the
// link is new. It must run inside this module (as tests do).
func Build(dir string) (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	bin := filepath.Join(dir, "kurrentdb-double")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command(goTool, append(args, commandPath)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("kurrentdbtest: go build %s: %v\n%s", commandPath, err, out)
	}
	return bin, nil
}

// Process is the double running as its own process, started by
// StartProcess. Its methods are safe for concurrent use.
type Process struct {
	bin      string
	dataFile string

	mu   sync.Mutex
	addr string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartProcess starts the binary bin (from BuildCommand) on a free port of
// 127.0.0.1, with the log in dataFile when it is not empty, and kills it
// when tb ends. It fails tb if the process does not start listening within
// a minute.
func StartProcess(tb testing.TB, bin, dataFile string) *Process {
	tb.Helper()
	p := &Process{bin: bin, dataFile: dataFile, addr: "127.0.0.1:0"}
	if err := p.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Kill)
	return p
}

// URL returns an insecure connection string for the process,
// esdb://host:port?tls=false.
func (p *Process) URL() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return "esdb://" + p.addr + "?tls=false"
}

// Start starts the process (again) on its address and data file and waits
// until it listens. Returns an error if it is running, fails to start, or
// does not listen within a minute.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return errors.New("kurrentdbtest: process already running")
	}
	args := []string{"-listen", p.addr}
	if p.dataFile != "" {
		args = append(args, "-data", p.dataFile)
	}
	cmd := exec.Command(p.bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("kurrentdbtest: start %s: %w", p.bin, err)
	}
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				listening <- addr
			}
		}
	}()
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }() //nolint:errcheck // the exit is observed through done
	select {
	case addr := <-listening:
		p.addr, p.cmd, p.done = addr, cmd, done
		return nil
	case <-done:
		return fmt.Errorf("kurrentdbtest: %s %v exited before listening", p.bin, args)
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		<-done
		return fmt.Errorf("kurrentdbtest: %s %v did not listen within a minute", p.bin, args)
	}
}

// Kill kills the process with SIGKILL, as a crash would, and waits for it
// to exit. The data file keeps what was written. Kill is idempotent.
func (p *Process) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Kill()
	<-p.done
	p.cmd = nil
}
