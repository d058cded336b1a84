package commands

// fifoMap is a map bounded by entry count whose oldest entry is evicted
// when a new key arrives at the bound (first in, first out): the memory of
// the process's hints (intentHints, writtenSet), each with its own bound.
// Not safe for concurrent use: its owner holds a lock around every call.
// The zero value is not ready; make it with newFIFOMap.
type fifoMap[K comparable, V any] struct {
	m    map[K]V
	ring []K // the keys in arrival order, a ring of at most limit
	next int // where the next key goes in ring once it is full
	max  int
}

// newFIFOMap returns an empty fifoMap of at most limit (> 0) entries.
func newFIFOMap[K comparable, V any](limit int) *fifoMap[K, V] {
	return &fifoMap[K, V]{m: make(map[K]V), max: limit}
}

// put stores v under k unless k is held already (its value stays, and so
// does its place in the eviction order); at the bound it first evicts the
// oldest key.
func (f *fifoMap[K, V]) put(k K, v V) {
	if _, ok := f.m[k]; ok {
		return
	}
	if len(f.ring) < f.max {
		f.ring = append(f.ring, k)
	} else {
		delete(f.m, f.ring[f.next])
		f.ring[f.next] = k
		f.next = (f.next + 1) % f.max
	}
	f.m[k] = v
}

// get returns the value held under k.
func (f *fifoMap[K, V]) get(k K) (V, bool) {
	v, ok := f.m[k]
	return v, ok
}
