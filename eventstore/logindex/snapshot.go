package logindex

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/retrysafe/booking/eventstore"
)

// snapshotVersion is the format of a snapshot; a snapshot of another
// format is not used (the next call reads the whole log).
const snapshotVersion = 2

// snapshot is the summary as saved: the rule and purged category it was
// built under, the position read up to, the event at it (its id, and the
// position before it, to check that the log still holds it there), the
// count, and the tracked streams.
type snapshot struct {
	Version int                 `json:"version"`
	Rule    string              `json:"rule"`
	Pos     eventstore.Position `json:"pos"`
	Prev    eventstore.Position `json:"prev"`
	LastID  string              `json:"last_id"`
	Count   int64               `json:"count"`
	Orders  map[string]*order   `json:"orders"`
	Recheck []string            `json:"recheck,omitempty"`
	Intents map[string][]stamp  `json:"intents"`
}

// Save saves the summary now (after reading the log up to its horizon), for
// a graceful stop: the next start reads only the log after it. Without
// WithSnapshots, or before the Index's first call, it does nothing. Returns a wrapped error if the log cannot
// be read or the snapshot cannot be saved.
func (ix *Index) Save(ctx context.Context) error {
	if ix.snapshots == nil {
		return nil
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if !ix.loaded {
		return nil // never used: nothing to save, and no reason to read the log now
	}
	if err := ix.catchUp(ctx); err != nil {
		return err
	}
	return ix.save(ctx)
}

// save writes the summary to the snapshots. Callers hold ix.mu.
func (ix *Index) save(ctx context.Context) error {
	snap := snapshot{Version: snapshotVersion, Rule: ix.ruleKey, Pos: ix.pos, Prev: ix.prev, LastID: ix.lastID, Count: ix.count,
		Orders: ix.orders, Intents: ix.intents}
	for s := range ix.recheck {
		snap.Recheck = append(snap.Recheck, s)
	}
	b, err := json.Marshal(snap)
	if err != nil {
		return fmt.Errorf("logindex: encode the snapshot: %w", err)
	}
	if err := ix.snapshots.Save(ctx, b); err != nil {
		return fmt.Errorf("logindex: save the snapshot: %w", err)
	}
	ix.unsaved = 0
	return nil
}

// load adopts the saved snapshot if there is one, it was built under the
// same rule and purged category (a snapshot omits the streams another rule
// evicted, which this one may call pending), and the log still holds its
// last event at its position (the first event after its previous
// position); otherwise the summary stays empty and the catch-up reads the
// whole log. Returns a wrapped error only if loading or checking fails on
// the way (not for a snapshot that does not fit). Callers hold ix.mu.
func (ix *Index) load(ctx context.Context) error {
	if ix.snapshots == nil {
		return nil
	}
	b, err := ix.snapshots.Load(ctx)
	if err != nil {
		return fmt.Errorf("logindex: load the snapshot: %w", err)
	}
	if b == nil {
		return nil
	}
	var snap snapshot
	if err := json.Unmarshal(b, &snap); err != nil || snap.Version != snapshotVersion {
		return nil // another format: read the whole log
	}
	if snap.Rule != ix.ruleKey {
		return nil // another rule's decisions: read the whole log
	}
	if !snap.Pos.IsZero() {
		evs, err := ix.log.ReadAll(ctx, snap.Prev, 1)
		if err != nil {
			return fmt.Errorf("logindex: check the snapshot at %s: %w", snap.Pos, err)
		}
		if len(evs) != 1 || evs[0].ID != snap.LastID || evs[0].Position != snap.Pos {
			return nil // another log, or a rewritten one: read the whole log
		}
	}
	ix.pos, ix.prev, ix.lastID, ix.count = snap.Pos, snap.Prev, snap.LastID, snap.Count
	if snap.Orders != nil {
		ix.orders = snap.Orders
	}
	if snap.Intents != nil {
		ix.intents = snap.Intents
	}
	for _, s := range snap.Recheck {
		ix.recheck[s] = true
	}
	return nil
}
