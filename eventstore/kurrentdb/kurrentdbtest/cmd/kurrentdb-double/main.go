// Command kurrentdb-double runs the KurrentDB server double of package
// kurrentdbtest as its own process, for end-to-end tests and outside tools
// that run the service against "KurrentDB" where no real server can be
// installed.
//
//	kurrentdb-double [-listen HOST:PORT[,HOST:PORT…]] [-nodes N] [-data FILE]
//	                 [-clock-offset D] [-version V] [-replication-lag D]
//	                 [-election-delay D] [-write-timeout D] [-control HOST:PORT]
//
// With -nodes 1 (the default) it is a single node on -listen. With -nodes N
// it is a cluster of N nodes over one log: -listen names each node's
// address (or one address: port 0 gives every node a free port, port P
// gives ports P, P+1, …). The connection string names every node as a
// gossip seed; the client finds the leader through gossip.
//
// It prints "listening on ADDR[,ADDR…]", then the connection string
// (esdb://ADDR[,ADDR…]?tls=false), then, with -control, "control on
// HOST:PORT" on stdout once it accepts connections, and runs until SIGINT
// or SIGTERM. With -data the log is kept in that file and survives a
// restart of the process (kill it and start it again with the same file
// and addresses). -clock-offset shifts the clock that stamps events'
// "created" times and judges $maxAge (e.g. -clock-offset 2h). -version
// picks the KurrentDB release whose size limits apply (default 26.1.1).
//
// The control address takes plain HTTP requests, for a test harness or
// curl: GET /status answers the nodes as JSON (address, running, leader,
// cut off) with the number of records in the log; POST /leader/stop stops
// the leader (answers its index; the others elect a new one after the
// election delay), POST /leader/isolate cuts it off from the others, POST
// /nodes/I/start, /nodes/I/stop, /nodes/I/isolate and /nodes/I/heal act on
// node I (from 0). Errors answer 4xx with a line of text.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
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
	listen := fs.String("listen", "127.0.0.1:2113", "host:port to listen on, or one per node, comma-separated (port 0 picks a free one)")
	nodes := fs.Int("nodes", 1, "number of nodes of the cluster over one log")
	data := fs.String("data", "", "file that keeps the log across restarts (empty: memory only)")
	offset := fs.Duration("clock-offset", 0, "shift of the clock that stamps events' created times and judges $maxAge")
	version := fs.String("version", kurrentdbtest.DefaultVersion, "KurrentDB release whose size limits apply")
	lag := fs.Duration("replication-lag", 0, "how long after the leader indexes a record followers can read it")
	election := fs.Duration("election-delay", kurrentdbtest.DefaultElectionDelay, "how long a cluster is without a leader after losing it")
	writeTimeout := fs.Duration("write-timeout", kurrentdbtest.DefaultWriteTimeout, "how long a write waits to commit before it is answered Aborted")
	control := fs.String("control", "", "host:port of the HTTP control endpoint (empty: none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *writeTimeout <= 0 || *election <= 0 || *lag < 0 {
		return errors.New("-write-timeout and -election-delay must be positive, -replication-lag not negative")
	}
	addrs, err := nodeAddrs(*listen, *nodes)
	if err != nil {
		return err
	}
	now := time.Now
	if *offset != 0 {
		d := *offset
		now = func() time.Time { return time.Now().Add(d) }
	}
	c, err := kurrentdbtest.StartCluster(addrs, kurrentdbtest.Options{
		DataFile: *data, WriteTimeout: *writeTimeout, Now: now, Version: *version,
		ReplicationLag: *lag, ElectionDelay: *election,
	})
	if err != nil {
		return err
	}
	defer c.Stop()
	fmt.Fprintf(stdout, "listening on %s\n%s\n", strings.Join(c.Addrs(), ","), c.URL())
	if *control != "" {
		lis, err := net.Listen("tcp", *control)
		if err != nil {
			return fmt.Errorf("-control: %w", err)
		}
		srv := &http.Server{Handler: controller{c}, ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(lis) //nolint:errcheck // ends with Close below
		defer srv.Close()
		fmt.Fprintf(stdout, "control on %s\n", lis.Addr())
	}
	<-ctx.Done()
	return nil
}

// nodeAddrs returns the listen address of each of n nodes from -listen:
// one per node, or one to spread (port 0 for all, or consecutive ports).
func nodeAddrs(listen string, n int) ([]string, error) {
	if n < 1 {
		return nil, fmt.Errorf("-nodes %d: want at least 1", n)
	}
	addrs := strings.Split(listen, ",")
	if len(addrs) == n {
		return addrs, nil
	}
	if len(addrs) != 1 {
		return nil, fmt.Errorf("-listen names %d addresses for -nodes %d: give one, or one per node", len(addrs), n)
	}
	host, port, err := net.SplitHostPort(addrs[0])
	if err != nil {
		return nil, fmt.Errorf("-listen %q: %w", listen, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p+n-1 > 65535 {
		return nil, fmt.Errorf("-listen %q: bad port", listen)
	}
	out := make([]string, n)
	for i := range out {
		if p == 0 {
			out[i] = net.JoinHostPort(host, "0")
		} else {
			out[i] = net.JoinHostPort(host, strconv.Itoa(p+i))
		}
	}
	return out, nil
}

// controller serves the control endpoint.
type controller struct{ c *kurrentdbtest.Cluster }

func (h controller) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if r.Method == http.MethodGet && r.URL.Path == "/status" {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(h.c.Status()) //nolint:errcheck // the client went away
		return
	}
	if r.Method != http.MethodPost {
		http.Error(w, "use GET /status or POST", http.StatusMethodNotAllowed)
		return
	}
	nodes := h.c.Nodes()
	var node *kurrentdbtest.Server
	var action string
	switch {
	case len(parts) == 2 && parts[0] == "leader":
		action = parts[1]
		if node = h.c.Leader(); node == nil {
			http.Error(w, "no leader now", http.StatusConflict)
			return
		}
	case len(parts) == 3 && parts[0] == "nodes":
		i, err := strconv.Atoi(parts[1])
		if err != nil || i < 0 || i >= len(nodes) {
			http.Error(w, fmt.Sprintf("no node %q: want 0 to %d", parts[1], len(nodes)-1), http.StatusNotFound)
			return
		}
		node, action = nodes[i], parts[2]
	default:
		http.Error(w, "unknown path "+r.URL.Path, http.StatusNotFound)
		return
	}
	switch action {
	case "stop":
		node.Stop()
	case "start":
		if err := node.Start(); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
	case "isolate":
		node.Isolate()
	case "heal":
		node.Heal()
	default:
		http.Error(w, "unknown action "+action, http.StatusNotFound)
		return
	}
	fmt.Fprintln(w, node.Index())
}
