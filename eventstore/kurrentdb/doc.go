// Package kurrentdb is the KurrentDB backend of eventstore.Store.
package kurrentdb
