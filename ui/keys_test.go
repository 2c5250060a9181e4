package ui_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/breaker"
	"github.com/jetflow-io/jetflow/debounce"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/keylimit"
	"github.com/jetflow-io/jetflow/ratelimit"
	"github.com/jetflow-io/jetflow/testutil"
	"github.com/jetflow-io/jetflow/ui"
)

type orderEvent struct {
	N int `json:"n"`
}

// GET api/ordering shows the partitions with their head and a key blocked
// by a task that failed for good; resolving it goes through the mutation
// guard and lets the key move on.
func TestOrderingAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, ui.Options{})
	ctx := t.Context()
	var mu sync.Mutex
	healthy := false
	ran := make(chan int, 8)
	e.worker(t, func(w *framework.Worker) {
		framework.Handle(w, "order.block", func(_ context.Context, _ *framework.Task, ev orderEvent) error {
			mu.Lock()
			ok := healthy || ev.N != 0
			mu.Unlock()
			if !ok {
				return errors.New("gateway declined")
			}
			ran <- ev.N
			return nil
		}, framework.WithOrdering(framework.Ordering{Partitions: 1, BlockOnDeadLetter: true}), framework.WithMaxAttempts(1))
	})
	var ids []string
	for n := range 2 {
		info, err := e.cl.Enqueue(ctx, "order.block", orderEvent{N: n}, framework.Ordered("order-7"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, info.ID)
	}
	var out struct {
		Partitions []ui.Partition  `json:"partitions"`
		Blocked    []ui.BlockedKey `json:"blocked"`
	}
	testutil.Wait(t, waitLong, "the key blocked", func() bool {
		if st := e.do(t, "GET", "api/ordering", "", false, &out); st != 200 {
			t.Fatalf("api/ordering: %d", st)
		}
		// The partition's head and its pending count are read from its
		// consumer, which may lag the blocked record (and the server counts
		// a stored message as pending for a consumer a moment after it
		// acknowledged the publish).
		return len(out.Blocked) == 1 && len(out.Partitions) == 1 && out.Partitions[0].HeadID != "" &&
			out.Partitions[0].Pending == 1
	})
	if b := out.Blocked[0]; b.Type != "order.block" || b.ID != ids[0] || b.Key != "order-7" || b.Error != "gateway declined" || b.Attempts != 1 {
		t.Fatalf("blocked %+v, want task %s of order-7", b, ids[0])
	}
	if len(out.Partitions) != 1 || out.Partitions[0].HeadID != ids[0] || out.Partitions[0].HeadKey != "order-7" || out.Partitions[0].Pending != 1 {
		t.Fatalf("partitions %+v, want head %s with one task waiting", out.Partitions, ids[0])
	}

	path := "api/ordering/order.block/" + ids[0] + "/resolve"
	if st := e.do(t, "POST", path, `{"resolution":"retry"}`, false, nil); st != http.StatusForbidden {
		t.Fatalf("resolve without the request header: %d, want 403", st)
	}
	ro, err := ui.New(e.nc, ui.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequestWithContext(ctx, "POST", "/"+path, strings.NewReader(`{"resolution":"retry"}`))
	req.Header.Set(ui.RequestHeader, "1")
	ro.ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden {
		t.Fatalf("resolve on a read-only dashboard: %d, want 403", rec.Code)
	}
	for body, want := range map[string]int{`{"resolution":"maybe"}`: 400, ``: 400} {
		if st := e.do(t, "POST", path, body, true, nil); st != want {
			t.Fatalf("resolve with body %q: %d, want %d", body, st, want)
		}
	}
	if st := e.do(t, "POST", "api/ordering/order.block/"+ids[1]+"/resolve", `{"resolution":"retry"}`, true, nil); st != http.StatusNotFound {
		t.Fatalf("resolving a task that is not blocked: %d, want 404", st)
	}
	if st := e.do(t, "POST", "api/ordering/bad%20type/"+ids[0]+"/resolve", `{"resolution":"retry"}`, true, nil); st != http.StatusBadRequest {
		t.Fatalf("resolving with a bad type: %d, want 400", st)
	}
	mu.Lock()
	healthy = true
	mu.Unlock()
	if st := e.do(t, "POST", path, `{"resolution":"retry"}`, true, nil); st != 200 {
		t.Fatalf("resolve: %d", st)
	}
	for want := range 2 {
		if n := testutil.Recv(t, ran, waitLong, "the key's tasks after the resolve"); n != want {
			t.Fatalf("event %d ran, want %d", n, want)
		}
	}
	testutil.Wait(t, waitLong, "the blocked key gone", func() bool {
		e.do(t, "GET", "api/ordering", "", false, &out)
		return len(out.Blocked) == 0
	})
}

// GET api/limits shows each limit with its use and throttle; GET
// api/unique the reservations.
func TestLimitsAndUniqueAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, ui.Options{})
	ctx := t.Context()
	done := make(chan struct{}, 4)
	w, err := framework.NewWorker(testutil.Connect(t, e.srv))
	if err != nil {
		t.Fatal(err)
	}
	if err := ratelimit.Install(w, ratelimit.WithDependency("gw", ratelimit.Limit{Limit: 300, Interval: time.Minute, Burst: 5})); err != nil {
		t.Fatal(err)
	}
	if _, err := breaker.Install(w); err != nil {
		t.Fatal(err)
	}
	w.HandleFunc("limited.job", func(ctx context.Context, _ *framework.Task) error {
		defer func() { done <- struct{}{} }()
		return breaker.Call(ctx, "gw", func(ctx context.Context) error {
			return ratelimit.Throttle(ctx, "gw", 30*time.Minute)
		})
	}, ratelimit.WithLimit(ratelimit.Limit{Limit: 20, Interval: time.Second}))
	testutil.StartWorker(t, w)

	var lim struct {
		Limits []ui.Limit `json:"limits"`
	}
	if st := e.do(t, "GET", "api/limits", "", false, &lim); st != 200 || len(lim.Limits) != 0 {
		t.Fatalf("limits before any use: %d %+v", st, lim)
	}
	if _, err := e.cl.Enqueue(ctx, "limited.job", nil); err != nil {
		t.Fatal(err)
	}
	testutil.Recv(t, done, waitLong, "the limited task")
	if st := e.do(t, "GET", "api/limits", "", false, &lim); st != 200 || len(lim.Limits) != 2 {
		t.Fatalf("limits: %d %+v, want the dependency's and the type's", st, lim)
	}
	dep, typ := lim.Limits[0], lim.Limits[1]
	if dep.Name != "dep.gw" || dep.Limit != 300 || dep.IntervalSeconds != 60 || dep.Burst != 5 || dep.LimitPerSecond != 5 ||
		!dep.Throttled || time.Until(dep.ThrottledUntil) < 20*time.Minute {
		t.Fatalf("dependency limit %+v", dep)
	}
	if typ.Name != "type.limited.job" || typ.Limit != 20 || typ.LimitPerSecond != 20 || typ.Burst != 1 || typ.Throttled || typ.LastSecond > 20 {
		t.Fatalf("type limit %+v", typ)
	}

	a, err := e.cl.Enqueue(ctx, "settle.day", map[string]string{"day": "2026-11-30"}, framework.Unique(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.cl.Enqueue(ctx, "import.batch", 7, framework.Unique(time.Hour), framework.UniqueKey("batch-7"), framework.UniqueUntilDone())
	if err != nil {
		t.Fatal(err)
	}
	var un struct {
		Reservations []ui.Reservation `json:"reservations"`
	}
	if st := e.do(t, "GET", "api/unique", "", false, &un); st != 200 || len(un.Reservations) != 2 {
		t.Fatalf("reservations: %d %+v", st, un)
	}
	if r := un.Reservations[0]; r.Type != "import.batch" || r.ID != b.ID || !r.UntilDone || r.Hash == "" || time.Until(r.Until) < 50*time.Minute {
		t.Fatalf("first reservation %+v, want %s until done", r, b.ID)
	}
	if r := un.Reservations[1]; r.Type != "settle.day" || r.ID != a.ID || r.UntilDone || time.Until(r.Until) < 23*time.Hour {
		t.Fatalf("second reservation %+v, want %s for a day", r, a.ID)
	}
	if st := e.do(t, "GET", "api/unique?type=settle.day", "", false, &un); st != 200 || len(un.Reservations) != 1 || un.Reservations[0].ID != a.ID {
		t.Fatalf("reservations of settle.day: %d %+v", st, un)
	}
	if st := e.do(t, "GET", "api/unique?type=a%20b", "", false, nil); st != http.StatusBadRequest {
		t.Fatalf("bad type: %d, want 400", st)
	}
	// The page is linked from the navigation and reads the three endpoints.
	for file, want := range map[string][]string{"": {`href="#/keys"`}, "app.js": {"pages.keys", `api("api/ordering")`, `api("api/limits")`, `api("api/unique")`}} {
		res, err := http.Get(e.web.URL + "/ops/" + file)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !strings.Contains(string(body), w) {
				t.Errorf("/%s lacks %s", file, w)
			}
		}
	}
}

// GET api/tenants lists the task keys flow control knows (here a key's
// override and a debounced burst), filters by type, and refuses a type
// that is not one.
func TestTenantsAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, ui.Options{})
	cl, err := framework.NewClient(testutil.Connect(t, e.srv))
	if err != nil {
		t.Fatal(err)
	}
	if err := keylimit.Set(t.Context(), cl, "tenant.sync", "globex", 3); err != nil {
		t.Fatal(err)
	}
	if _, err := debounce.Enqueue(t.Context(), cl, "tenant.index", 1, debounce.Options{Key: "initech", Window: time.Hour}); err != nil {
		t.Fatal(err)
	}
	var out struct {
		Keys []inspect.KeyInfo `json:"keys"`
	}
	if st := e.do(t, "GET", "api/tenants", "", false, &out); st != 200 || len(out.Keys) != 2 {
		t.Fatalf("tenants: %d %+v", st, out)
	}
	if st := e.do(t, "GET", "api/tenants?type=tenant.sync", "", false, &out); st != 200 || len(out.Keys) != 1 || out.Keys[0].Limit != 3 {
		t.Fatalf("tenants of tenant.sync: %d %+v", st, out)
	}
	if st := e.do(t, "GET", "api/tenants?type=bad%20type", "", false, nil); st != 400 {
		t.Errorf("a type with a space: %d, want 400", st)
	}
}
