// Package pgcoord holds what the service needs from PostgreSQL whatever
// its event store backend: the database clock (Clock), named advisory
// locks that keep one instance of a job running across replicas (Locks),
// consumer checkpoints (Checkpoints) and fenced leases with a checkpoint
// (Leases). PostgreSQL is always present, even when the events live in
// KurrentDB, so these never touch the event store's own tables (events,
// streams); the queries over those live in eventstore/pgstore.
//
// Every type here wraps a pgxpool.Pool, is created with its NewX function
// on a database migrated by package migrations, and is safe for concurrent
// use. Callers declare the small interfaces they need (commands.Clock,
// commands.Checkpoints, ...) and these types satisfy them.
package pgcoord
