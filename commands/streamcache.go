package commands

import (
	"sync"

	"github.com/retrysafe/booking/eventstore"
)

// maxCachedStreams bounds each stream cache (reservations, orders) by entry
// count; see streamCache for the eviction rule.
const maxCachedStreams = 4096

// streamCache holds, per stream, the state this process last wrote or read
// there and the stream's revision then (the shows have their own cache,
// showcache.go). It is a hint, never the truth: another replica (or the
// process manager) may have appended since, which the next append at the
// cached revision reveals by a revision conflict, or a read of the stream's
// tail from the cached revision + 1. Only decisions fenced that way, or that
// depend on facts a stream never changes, use it.
//
// Bound and eviction: at most maxCachedStreams entries; inserting past the
// bound drops an arbitrary entry (Go's map order), and an entry a use found
// stale is dropped. A dropped entry costs one read of its whole stream the
// next time. Safe for concurrent use.
type streamCache[S any] struct {
	mu sync.Mutex
	m  map[string]cachedStream[S]
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
	} else if len(c.m) >= maxCachedStreams {
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
