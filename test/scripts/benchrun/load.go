package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// api is an HTTP client of one `booking serve` with the benchmark's tokens,
// a connection pool of exactly the load's concurrency.
type api struct {
	base, user, admin string
	hc                *http.Client
}

func newAPI(base string, conns int) *api {
	tr := &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, IdleConnTimeout: time.Minute}
	return &api{base: base, user: benchUserToken, admin: benchAdminToken, hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// do sends one request and returns the status, the decoded JSON body (nil
// when not an object) and the Retry-After hint.
func (a *api) do(ctx context.Context, method, path, token, key string, body any) (int, map[string]any, time.Duration, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return 0, nil, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Prefer", "wait=10") // answer when final, within 10 s (RFC 7240)
	}
	res, err := a.hc.Do(req)
	if err != nil {
		return 0, nil, 0, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, nil, 0, err
	}
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	var after time.Duration
	if s, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil {
		after = time.Duration(s) * time.Second
	}
	return res.StatusCode, out, after, nil
}

// final repeats a request with its key until a final answer (anything but
// 202, 409 idempotency-key-in-use, 429, 5xx or a connection error), at most
// for 30 s; it returns the final status and body and how many repeats it took.
func (a *api) final(ctx context.Context, method, path, token, key string, body any) (int, map[string]any, int, error) {
	deadline := time.Now().Add(30 * time.Second)
	for repeats := 0; ; repeats++ {
		code, out, after, err := a.do(ctx, method, path, token, key, body)
		retry := err != nil || code == http.StatusAccepted || code == http.StatusTooManyRequests || code >= 500 ||
			(code == http.StatusConflict && out["type"] != nil && fmt.Sprint(out["type"]) != "" && isInUse(out))
		if !retry {
			return code, out, repeats, nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("%s %s: status %d after %d repeats: %v", method, path, code, repeats, out)
			}
			return code, out, repeats, err
		}
		if after <= 0 || after > time.Second {
			after = 20 * time.Millisecond
		}
		select {
		case <-ctx.Done():
		case <-time.After(after):
		}
	}
}

// isInUse reports whether a 409 problem is idempotency-key-in-use (the
// first request with the key is still running: repeat it).
func isInUse(p map[string]any) bool {
	s := fmt.Sprint(p["type"]) + " " + fmt.Sprint(p["code"])
	return bytes.Contains([]byte(s), []byte("in-use"))
}

// createShow schedules a show of capacity seats and returns its id.
func (a *api) createShow(ctx context.Context, name string, capacity int) (string, error) {
	body := map[string]any{"name": name, "starts_at": time.Now().Add(30 * 24 * time.Hour).UTC().Format(time.RFC3339),
		"capacity": capacity, "price": map[string]any{"amount": 1000, "currency": "EUR"}}
	code, out, _, err := a.final(ctx, "POST", "/v1/shows", a.admin, uuid.NewString(), body)
	if err != nil {
		return "", err
	}
	if code != http.StatusCreated {
		return "", fmt.Errorf("create show: status %d: %v", code, out)
	}
	return fmt.Sprint(out["id"]), nil
}

// reserve holds one seat of show and returns the reservation id.
func (a *api) reserve(ctx context.Context, show string) (string, int, error) {
	code, out, rep, err := a.final(ctx, "POST", "/v1/reservations", a.user, uuid.NewString(), map[string]any{"show_id": show, "quantity": 1})
	if err != nil {
		return "", rep, err
	}
	if code != http.StatusCreated {
		return "", rep, fmt.Errorf("reservation: status %d: %v", code, out)
	}
	return fmt.Sprint(out["id"]), rep, nil
}

// orderBody is the body of POST /v1/orders paying reservation res with tok_visa.
func orderBody(res string) map[string]any {
	return map[string]any{"reservation_id": res, "payment": map[string]any{"token": "tok_visa"}}
}

// order orders reservation res with key and returns the confirmed order's id.
func (a *api) order(ctx context.Context, res, key string) (string, int, error) {
	code, out, rep, err := a.final(ctx, "POST", "/v1/orders", a.user, key, orderBody(res))
	if err != nil {
		return "", rep, err
	}
	if code != http.StatusCreated {
		return "", rep, fmt.Errorf("order: status %d: %v", code, out)
	}
	id := fmt.Sprint(out["id"])
	if o, ok := out["order"].(map[string]any); ok && out["id"] == nil {
		id = fmt.Sprint(o["id"])
	}
	return id, rep, nil
}

// loadResult is one timed phase of a closed-loop load: operations completed
// inside the window, their latencies, the repeats they needed.
type loadResult struct {
	total   int // every operation completed, warm-up included
	ops     int
	elapsed time.Duration
	lat     []time.Duration
	repeats int
}

// add sums o into r, as one window of r's and o's lengths together.
func (r *loadResult) add(o loadResult) {
	r.total += o.total
	r.ops += o.ops
	r.elapsed += o.elapsed
	r.lat = append(r.lat, o.lat...)
	r.repeats += o.repeats
}

func (r loadResult) rate() float64 { return float64(r.ops) / r.elapsed.Seconds() }

// pct returns the p-th percentile (0–100) of the latencies in milliseconds.
func (r loadResult) pct(p float64) float64 {
	if len(r.lat) == 0 {
		return 0
	}
	s := slices.Clone(r.lat)
	slices.Sort(s)
	i := int(p / 100 * float64(len(s)-1))
	return float64(s[i].Microseconds()) / 1000
}

// runLoad runs op from clients goroutines for warm + d: operations that
// finish during the warm-up are not counted; those that finish after d are
// not either. The first error stops the load and is returned.
func runLoad(ctx context.Context, clients int, warm, d time.Duration, op func(ctx context.Context, worker, i int) (int, error)) (loadResult, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu      sync.Mutex
		res     loadResult
		seq     atomic.Int64
		wg      sync.WaitGroup
		start   = time.Now()
		from    = start.Add(warm)
		to      = from.Add(d)
		counted = func(t time.Time) bool { return !t.Before(from) && !t.After(to) }
	)
	for w := range clients {
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(to) {
				t0 := time.Now()
				rep, err := op(ctx, w, int(seq.Add(1)))
				if err != nil {
					if ctx.Err() == nil {
						cancel(err)
					}
					return
				}
				t1 := time.Now()
				mu.Lock()
				res.total++
				mu.Unlock()
				if counted(t1) {
					mu.Lock()
					res.ops++
					res.lat = append(res.lat, t1.Sub(t0))
					res.repeats += rep
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	res.elapsed = d
	if err := context.Cause(ctx); err != nil && ctx.Err() != nil {
		return res, err
	}
	return res, nil
}
