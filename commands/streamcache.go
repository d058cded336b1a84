package commands

import (
	"cmp"
	"sync"

	"github.com/retrysafe/booking/eventstore"
)

// maxCachedStreams bounds a stream cache without a limit of its own (the
// reservations) by entry count; see streamCache for the eviction rule.
const maxCachedStreams = 4096

// maxKeptStreams bounds the kept order and intent streams (streams.orders,
// streams.intents), each: whole streams weigh more than a reservation's state,
// and a repeat comes soon after its request or not at all.
const maxKeptStreams = 1024

// streamCache holds, per stream, the state this process last wrote or read
// there and the stream's revision then (the shows have their own cache,
// showcache.go). It is a hint, never the truth: another replica (or the
// process manager) may have appended since, which the next append at the
// cached revision reveals by a revision conflict, or a read of the stream's
// tail from the cached revision + 1. Only decisions fenced that way, or that
// depend on facts a stream never changes, use it.
//
// Bound and eviction: at most limit entries (maxCachedStreams when unset;
// the kept order and intent streams set maxKeptStreams); inserting past the
// bound drops an arbitrary entry (Go's map order), and an entry a use found
// stale is dropped. A dropped entry costs one read of its whole stream the
// next time. Safe for concurrent use.
type streamCache[S any] struct {
	mu sync.Mutex
	m  map[string]cachedStream[S]
	// limit is the bound when set (> 0); maxCachedStreams otherwise.
	limit int
}

// cachedStream is one entry: the folded state at revision last.
type cachedStream[S any] struct {
	state S
	last  eventstore.Revision
}

// get returns the cached state of stream name and its revision.
func (c *streamCache[S]) get(name string) (S, eventstore.Revision, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[name]
	return e.state, e.last, ok
}

// put caches state at revision last for stream name, unless a later
// revision is cached already.
func (c *streamCache[S]) put(name string, state S, last eventstore.Revision) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]cachedStream[S])
	}
	if e, ok := c.m[name]; ok {
		if e.last > last {
			return
		}
	} else if len(c.m) >= cmp.Or(c.limit, maxCachedStreams) {
		for k := range c.m {
			delete(c.m, k)
			break
		}
	}
	c.m[name] = cachedStream[S]{state: state, last: last}
}

// drop forgets stream name.
func (c *streamCache[S]) drop(name string) {
	c.mu.Lock()
	delete(c.m, name)
	c.mu.Unlock()
}
