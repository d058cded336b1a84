// Package migrations holds the service's PostgreSQL schema as numbered SQL
// migrations, embedded in the binary and applied with pressly/goose v3.
//
// Files are named NNNNN_name.sql (five digits, goose's sequential numbering);
// 00001_eventstore.sql is the event store (eventstore/pgstore). Each file has
// "-- +goose Up" and "-- +goose Down" sections and runs in one transaction.
// Applied migrations are recorded in goose's goose_db_version table.
package migrations

import "embed"

// FS holds every *.sql migration at its root, in the form goose expects.
//
//go:embed *.sql
var FS embed.FS
