package staterec

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestCheckProgress(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		p    Progress
		want string // part of the error; "" for none
	}{
		{"counts", Progress{Done: 3, Total: 10, Message: "rows"}, ""},
		{"unknown total", Progress{Done: 12345}, ""},
		{"done at total", Progress{Done: 10, Total: 10}, ""},
		{"longest message", Progress{Message: strings.Repeat("é", MaxProgressMessage/2)}, ""},
		{"negative done", Progress{Done: -1}, "negative"},
		{"negative total", Progress{Total: -1}, "negative"},
		{"above total", Progress{Done: 11, Total: 10}, "more than the total"},
		{"long message", Progress{Message: strings.Repeat("x", MaxProgressMessage+1)}, "limit is 256"},
		{"not utf-8", Progress{Message: "a\xffb"}, "UTF-8"},
		{"newline", Progress{Message: "a\nb"}, "control character"},
		{"escape", Progress{Message: "\x1b[31mred"}, "control character"},
		{"c1 control", Progress{Message: "a\u009bb"}, "control character"},
		{"line separator", Progress{Message: "a\u2028b"}, "control character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckProgress(tc.p)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("CheckProgress(%+v) = %v, want nil", tc.p, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("CheckProgress(%+v) = %v, want an error saying %q", tc.p, err, tc.want)
			}
		})
	}
}

func TestRecordProgressJSON(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 2, 10, 15, 4, 0, time.UTC)
	r := Record{ID: "a", Priority: "normal", State: Running, UpdatedAt: at,
		Progress: Progress{Done: 2, Total: 5, Message: `copying "x" <y>`}}
	got := string(r.AppendJSON(nil))
	want := `{"id":"a","priority":"normal","state":"running","updated_at":"2026-03-02T10:15:04Z",` +
		`"progress":{"done":2,"total":5,"message":"copying \"x\" \u003cy\u003e"}}`
	if got != want {
		t.Fatalf("AppendJSON:\n got %s\nwant %s", got, want)
	}
	r.Progress = Progress{}
	if got := string(r.AppendJSON(nil)); strings.Contains(got, "progress") || !json.Valid([]byte(got)) {
		t.Fatalf("no progress: %s", got)
	}
	r.Progress = Progress{Done: 0, Total: 7}
	if got := string(r.AppendJSON(nil)); !strings.Contains(got, `"progress":{"done":0,"total":7}`) {
		t.Fatalf("zero done of a known total: %s", got)
	}
}

// The first report is written at once; reports within the interval
// replace each other and the latest is written once it passed.
func TestAttemptReportCoalesces(t *testing.T) {
	t.Parallel()
	var a Attempt
	wrote := make(chan Progress, 10)
	write := func(p Progress) { wrote <- p }
	a.Report(Progress{Done: 1}, time.Second, write)
	if p := recv(t, wrote); p.Done != 1 {
		t.Fatalf("first write %+v", p)
	}
	a.Report(Progress{Done: 2}, time.Second, write)
	a.Report(Progress{Done: 3, Message: "last"}, time.Second, write)
	if p := recv(t, wrote); p.Done != 3 || p.Message != "last" {
		t.Fatalf("coalesced write %+v, want the latest (3)", p)
	}
	a.Finished()
	if len(wrote) != 0 {
		t.Fatalf("%d more writes: %v", len(wrote), <-wrote)
	}
	if p := a.Progress(); p.Done != 3 || !a.Wrote() {
		t.Fatalf("Progress() = %+v, Wrote() = %v", p, a.Wrote())
	}
}

// A progress write still waiting for its interval is cancelled by the
// final record, and reports after it are ignored.
func TestAttemptFinishedCancelsPendingProgress(t *testing.T) {
	t.Parallel()
	var a Attempt
	n := 0
	write := func(Progress) { n++ }
	a.Report(Progress{Done: 1}, time.Hour, write)
	a.Report(Progress{Done: 2}, time.Hour, write)
	a.Finished()
	a.Report(Progress{Done: 3}, time.Hour, write)
	a.mu.Lock()
	defer a.mu.Unlock()
	if n != 1 || a.progressTimer != nil || a.progress.Done != 2 {
		t.Fatalf("writes %d, timer %v, progress %+v: want 1 write, no timer, the last value before Finished", n, a.progressTimer, a.progress)
	}
}

// A progress record is a "running" record: the delayed one is not needed.
func TestAttemptProgressReplacesRunning(t *testing.T) {
	t.Parallel()
	var a Attempt
	a.Started(time.Hour, func() { t.Error("delayed running record written") })
	a.Report(Progress{Done: 1}, time.Hour, func(Progress) {})
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.timer != nil {
		t.Fatal("the delayed running record is still armed after a progress record")
	}
}

func recv(t *testing.T, ch <-chan Progress) Progress {
	t.Helper()
	select {
	case p := <-ch:
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("no write")
		return Progress{}
	}
}
