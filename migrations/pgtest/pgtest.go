// Package pgtest gives tests a fresh, migrated PostgreSQL database on a
// throwaway server.
//
// The server comes from BOOKING_TEST_DATABASE_URL: a URL (or keyword/value
// connection string) of a role that may create and drop databases, usually
// the superuser of a server that `make test` started. Without it a test is
// skipped, except under CI=true, where it fails: CI never skips silently.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/migrations"
)

// EnvURL is the environment variable that names the test server.
const EnvURL = "BOOKING_TEST_DATABASE_URL"

// setupTimeout bounds creating, migrating and dropping one database.
const setupTimeout = time.Minute

// defaultMaxConns is NewPool's pool size unless the URL sets pool_max_conns:
// enough for the event store's concurrency tests (pgxpool's own default is
// the number of CPUs, at least 4).
const defaultMaxConns = 40

// ServerURL returns BOOKING_TEST_DATABASE_URL. If it is unset it skips the
// test with "missing BOOKING_TEST_DATABASE_URL", or fails it when CI=true.
func ServerURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv(EnvURL)
	if u != "" {
		return u
	}
	if os.Getenv("CI") == "true" {
		tb.Fatalf("missing %s (CI=true: integration tests must not be skipped)", EnvURL)
	}
	tb.Skipf("missing %s", EnvURL)
	return ""
}

// NewDatabase creates a uniquely named database (booking_test_<16 hex>) on
// the server named by BOOKING_TEST_DATABASE_URL, applies every migration
// (migrations.Up) and returns the new database's URL, in the same form as the
// server's. A cleanup registered on tb drops the database WITH (FORCE), which
// also ends connections still open to it; register pool closes after
// NewDatabase so they run first. Skips or fails as ServerURL does when the
// variable is unset, and fails the test if the server cannot be reached. Safe
// for concurrent use by parallel tests.
func NewDatabase(tb testing.TB) string {
	tb.Helper()
	dbURL := NewEmptyDatabase(tb)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := migrations.Up(ctx, dbURL); err != nil {
		tb.Fatalf("pgtest: migrate %s: %v", dbURL, err)
	}
	return dbURL
}

// NewEmptyDatabase is NewDatabase without the migrations: the database is
// as CREATE DATABASE made it (a copy of template1).
func NewEmptyDatabase(tb testing.TB) string {
	tb.Helper()
	server := ServerURL(tb)
	name := "booking_test_" + randomHex(8)
	dbURL, err := withDatabase(server, name)
	if err != nil {
		tb.Fatalf("pgtest: %s: %v", EnvURL, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := execServer(ctx, server, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		tb.Fatalf("pgtest: create database %s: %v", name, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		if err := execServer(ctx, server, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			tb.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return dbURL
}

// NewPool returns a pgx pool on databaseURL and registers its Close on tb.
// Unless the URL sets pool_max_conns, the pool holds up to 40 connections.
// It fails the test if the URL does not parse or the database cannot be
// reached.
func NewPool(tb testing.TB, databaseURL string) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		tb.Fatalf("pgtest: parse database URL: %v", err)
	}
	if !strings.Contains(databaseURL, "pool_max_conns") {
		cfg.MaxConns = defaultMaxConns
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		tb.Fatalf("pgtest: new pool: %v", err)
	}
	tb.Cleanup(pool.Close)
	if err := pool.Ping(ctx); err != nil {
		tb.Fatalf("pgtest: ping: %v", err)
	}
	return pool
}

// execServer runs one statement on a short-lived connection to the server.
func execServer(ctx context.Context, serverURL, sql string) error {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// withDatabase returns serverURL with its database replaced by name.
func withDatabase(serverURL, name string) (string, error) {
	if strings.HasPrefix(serverURL, "postgres://") || strings.HasPrefix(serverURL, "postgresql://") {
		u, err := url.Parse(serverURL)
		if err != nil {
			return "", err
		}
		u.Path = "/" + name
		u.RawPath = ""
		q := u.Query()
		if q.Has("dbname") {
			q.Set("dbname", name)
			u.RawQuery = q.Encode()
		}
		return u.String(), nil
	}
	// Keyword/value form: a later keyword overrides an earlier one.
	return serverURL + " dbname=" + name, nil
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand, Go 1.24+)
	return hex.EncodeToString(b)
}
