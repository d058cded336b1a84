package kurrentdbtest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

// ProcessOptions configure a Process (the command's flags).
type ProcessOptions struct {
	// DataFile keeps the log across restarts of the process (-data).
	DataFile string
	// Nodes is the number of nodes of the cluster (-nodes, default 1).
	Nodes int
	// ClockOffset shifts the double's clock (-clock-offset).
	ClockOffset time.Duration
	// Version is the KurrentDB release imitated (-version, default
	// DefaultVersion).
	Version string
	// ReplicationLag delays followers' reads (-replication-lag).
	ReplicationLag time.Duration
	// ElectionDelay is how long the cluster has no leader after losing it
	// (-election-delay, default DefaultElectionDelay).
	ElectionDelay time.Duration
}

// Process is the double running as its own process, started by
// StartProcess or StartProcessWith, with a control endpoint for the
// cluster's nodes. Its methods are safe for concurrent use.
type Process struct {
	bin  string
	opts ProcessOptions

	mu      sync.Mutex
	addrs   []string
	control string
	cmd     *exec.Cmd
	done    chan struct{}
}

// StartProcess starts the binary bin (from BuildCommand) as a single node
// on a free port of 127.0.0.1, with the log in dataFile when it is not
// empty, and kills it when tb ends. It fails tb if the process does not
// start listening within a minute.
func StartProcess(tb testing.TB, bin, dataFile string) *Process {
	tb.Helper()
	return StartProcessWith(tb, bin, ProcessOptions{DataFile: dataFile})
}

// StartProcessWith starts the binary bin (from BuildCommand) with opts,
// every node on a free port of 127.0.0.1, and kills it when tb ends. It
// fails tb if the process does not start listening within a minute.
func StartProcessWith(tb testing.TB, bin string, opts ProcessOptions) *Process {
	tb.Helper()
	opts.Nodes = max(opts.Nodes, 1)
	p := &Process{bin: bin, opts: opts}
	for range opts.Nodes {
		p.addrs = append(p.addrs, "127.0.0.1:0")
	}
	if err := p.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Kill)
	return p
}

// URL returns an insecure connection string naming every node,
// esdb://host:port[,host:port…]?tls=false.
func (p *Process) URL() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return "esdb://" + strings.Join(p.addrs, ",") + "?tls=false"
}

// Start starts the process (again) on its addresses and data file and waits
// until it listens. Returns an error if it is running, fails to start, or
// does not listen within a minute.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return errors.New("kurrentdbtest: process already running")
	}
	args := []string{"-listen", strings.Join(p.addrs, ","), "-nodes", strconv.Itoa(p.opts.Nodes), "-control", "127.0.0.1:0"}
	if p.opts.DataFile != "" {
		args = append(args, "-data", p.opts.DataFile)
	}
	if p.opts.ClockOffset != 0 {
		args = append(args, "-clock-offset", p.opts.ClockOffset.String())
	}
	if p.opts.Version != "" {
		args = append(args, "-version", p.opts.Version)
	}
	if p.opts.ReplicationLag > 0 {
		args = append(args, "-replication-lag", p.opts.ReplicationLag.String())
	}
	if p.opts.ElectionDelay > 0 {
		args = append(args, "-election-delay", p.opts.ElectionDelay.String())
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
	type ready struct{ addrs, control string }
	up := make(chan ready, 1)
	go func() {
		sc := bufio.NewScanner(out)
		var r ready
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				r.addrs = a
			}
			if a, ok := strings.CutPrefix(sc.Text(), "control on "); ok {
				r.control = a
				up <- r
			}
		}
	}()
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }() //nolint:errcheck // the exit is observed through done
	select {
	case r := <-up:
		p.addrs, p.control, p.cmd, p.done = strings.Split(r.addrs, ","), r.control, cmd, done
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

// Status returns the state of the process's cluster (GET /status of its
// control endpoint).
func (p *Process) Status() (Status, error) {
	var st Status
	body, err := p.controlCall(http.MethodGet, "/status")
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, fmt.Errorf("kurrentdbtest: control /status: %w", err)
	}
	return st, nil
}

// StopLeader stops the cluster's leader node (the others elect a new one
// after the election delay) and returns its index.
func (p *Process) StopLeader() (int, error) { return p.nodeCall("/leader/stop") }

// StartNode starts node i of the cluster again (it rejoins as a follower).
func (p *Process) StartNode(i int) error {
	_, err := p.nodeCall(fmt.Sprintf("/nodes/%d/start", i))
	return err
}

// nodeCall posts to the control endpoint and returns the node index it
// answers.
func (p *Process) nodeCall(path string) (int, error) {
	body, err := p.controlCall(http.MethodPost, path)
	if err != nil {
		return -1, err
	}
	return strconv.Atoi(strings.TrimSpace(string(body)))
}

// controlCall makes a request to the control endpoint and returns the
// body of a 200 answer.
func (p *Process) controlCall(method, path string) ([]byte, error) {
	p.mu.Lock()
	control, running := p.control, p.cmd != nil
	p.mu.Unlock()
	if !running {
		return nil, errors.New("kurrentdbtest: the process is not running")
	}
	req, err := http.NewRequest(method, "http://"+control+path, nil)
	if err != nil {
		return nil, err
	}
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("kurrentdbtest: control %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("kurrentdbtest: control %s: %s: %s", path, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}
