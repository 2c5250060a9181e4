package handlers_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/breaker"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/handlers"
	"github.com/jetflow-io/jetflow/ratelimit"
)

// A 429 with Retry-After seen by one worker pauses the dependency for the
// other worker too: its next request waits until the pause ends.
func TestDoHTTP429ThrottlesTheFleet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var mu sync.Mutex
	var hits []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits = append(hits, time.Now())
		first := len(hits) == 1
		mu.Unlock()
		if first {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)

	lim := ratelimit.Limit{Limit: 1000, Burst: 10}
	hooks, out := outcomes()
	for range 2 {
		w := e.Worker(t, framework.WithHooks(hooks))
		if _, err := breaker.Install(w); err != nil {
			t.Fatal(err)
		}
		if err := ratelimit.Install(w, ratelimit.WithDependency("api", lim)); err != nil {
			t.Fatal(err)
		}
		w.HandleFunc("api.call", func(ctx context.Context, _ *framework.Task) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
			if err != nil {
				return framework.Permanent(err)
			}
			resp, err := handlers.DoHTTP(ctx, srv.Client(), "api", req)
			if err != nil {
				return err
			}
			return resp.Body.Close()
		})
		start(t, w)
	}
	e.Enqueue(t, "api.call", nil)
	if o := recvOutcome(t, out); o.event != "retried" {
		t.Fatalf("first task: %+v, want retried after the 429", o)
	}
	mu.Lock()
	throttledAt := hits[0]
	mu.Unlock()
	// Another task, taken by either worker, may not reach the server
	// before Retry-After has passed. (The first task's own retry also
	// waits for it.)
	e.Enqueue(t, "api.call", nil)
	for range 2 {
		if o := recvOutcome(t, out); o.event != "succeeded" {
			t.Fatalf("outcome %+v, want succeeded", o)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, h := range hits[1:] {
		if h.Sub(throttledAt) < 2*time.Second-50*time.Millisecond {
			t.Fatalf("request %v after the 429, Retry-After asked for 2 s", h.Sub(throttledAt))
		}
	}
}
