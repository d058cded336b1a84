package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/cmd/booking/internal/configerr"
	"github.com/retrysafe/booking/eventstore/kurrentdb"
	"github.com/retrysafe/booking/eventstore/pgcoord"
)

// databaseURLExample ends every refusal of DATABASE_URL.
const databaseURLExample = "want a postgres:// URL such as postgres://user:password@host:5432/booking?sslmode=require"

// CheckDatabaseURL returns a configuration error naming DATABASE_URL unless
// raw is a PostgreSQL URL pgx can read (scheme postgres or postgresql;
// pgx's keyword=value form is not accepted) with parameters pgx knows. It
// does not connect. The message never repeats the URL: it may hold a
// password.
func CheckDatabaseURL(raw string) error {
	if raw == "" {
		return configerr.New("DATABASE_URL", "required; %s", databaseURLExample)
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the reason without the URL
		}
		return configerr.New("DATABASE_URL", "not a URL (%v); %s", err, databaseURLExample)
	case u.Scheme == "" || !strings.HasPrefix(raw[len(u.Scheme):], "://"):
		return configerr.New("DATABASE_URL", "not a URL; %s", databaseURLExample)
	case u.Scheme != "postgres" && u.Scheme != "postgresql":
		return configerr.New("DATABASE_URL", "the scheme %q is not PostgreSQL's; %s", u.Scheme, databaseURLExample)
	}
	if _, err := pgxpool.ParseConfig(raw); err != nil {
		msg := err.Error() // "cannot parse `URL with the password masked`: reason"
		if i := strings.LastIndex(msg, "`: "); i >= 0 {
			msg = msg[i+3:]
		}
		return configerr.New("DATABASE_URL", "pgx cannot read it: %s; %s", msg, databaseURLExample)
	}
	return nil
}

// CheckListenAddr checks addr, the listen address of variable, the way
// net.Listen("tcp", addr) will read it, so that a value it would refuse is
// a configuration error (exit 2) rather than a failure at listen (exit 1):
// host:port as net.SplitHostPort splits it (an IPv6 host in brackets), the
// port a number 0–65535 (0 or empty: any free port) or a service name
// net.LookupPort resolves for tcp ("http", from /etc/services). The host is
// not resolved here: a name that does not resolve, like an address in use,
// fails at listen. hint follows "must be host:port" in the message.
func CheckListenAddr(variable, addr, hint string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return configerr.New(variable, "must be host:port%s: %v", hint, err)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return configerr.New(variable, "%q is not a port: want a number 0–65535 or a service name such as http (%v)", port, err)
	}
	return nil
}

// Listener is a listen address of one process and the variable that sets
// it.
type Listener struct{ Variable, Addr string }

// CheckDistinctAddrs returns a configuration error naming the later
// variable when two of ls (each already checked by CheckListenAddr) would
// bind the same port: the same host, or either host a wildcard (empty,
// 0.0.0.0 or ::, which net.Listen binds on every address). The process
// would otherwise start and then fail at its own second listen with
// "address already in use" (exit 1), as if another program held the port.
// Port 0 (any free port) never collides; host names are not resolved.
func CheckDistinctAddrs(ls []Listener) error {
	type bound struct {
		Listener
		host string
		port int
	}
	var seen []bound
	for _, l := range ls {
		host, p, err := net.SplitHostPort(l.Addr)
		if err != nil {
			continue // CheckListenAddr reports it
		}
		port, err := net.LookupPort("tcp", p)
		if err != nil || port == 0 {
			continue
		}
		for _, b := range seen {
			if b.port == port && (b.host == host || wildcardHost(b.host) || wildcardHost(host)) {
				return configerr.New(l.Variable, "%s takes port %d of %s (%s): each listener needs a port of its own", l.Addr, port, b.Variable, b.Addr)
			}
		}
		seen = append(seen, bound{l, host, port})
	}
	return nil
}

// wildcardHost reports whether host, from a listen address, means every
// address of the machine.
func wildcardHost(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// EventStoreBackend returns the backend name (pgcoord.BackendPostgres or
// BackendKurrentDB) of a BOOKING_EVENT_STORE value, or a configuration
// error naming the variable.
func EventStoreBackend(spec string) (string, error) {
	switch {
	case spec == "" || spec == "postgres":
		return pgcoord.BackendPostgres, nil
	case kurrentdb.IsConnectionString(spec):
		return pgcoord.BackendKurrentDB, nil
	}
	return "", configerr.New("BOOKING_EVENT_STORE", "must be postgres or a kurrentdb://, kurrentdb+discover://, esdb:// or esdb+discover:// connection string")
}

// CheckEventStore validates a BOOKING_EVENT_STORE value, connection string
// included (without connecting); the error names the variable and never
// the password.
func CheckEventStore(spec string) error {
	backend, err := EventStoreBackend(spec)
	if err != nil || backend != pgcoord.BackendKurrentDB {
		return err
	}
	s, err := kurrentdb.New(spec)
	if err != nil {
		return configerr.New("BOOKING_EVENT_STORE", "%v", err)
	}
	return s.Close()
}

// ListenError returns the error of a listener that could not be bound: "cannot listen on
// ADDR (VARIABLE): reason", such as "address already in use". It is a
// failure while running (exit 1), not a configuration error: the address
// parsed, another process holds it.
func ListenError(addr, variable string, err error) error {
	reason := err
	var se *os.SyscallError
	if errors.As(err, &se) {
		reason = se.Err // "address already in use" without "listen tcp …: bind:"
	}
	return &listenErr{addr: addr, variable: variable, err: err, reason: reason}
}

// listenErr is ListenError's error; Unwrap returns the net error.
type listenErr struct {
	addr, variable string
	err, reason    error
}

func (e *listenErr) Error() string {
	return fmt.Sprintf("cannot listen on %s (%s): %v", e.addr, e.variable, e.reason)
}

func (e *listenErr) Unwrap() error { return e.err }
