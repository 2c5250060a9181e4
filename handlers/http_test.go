package handlers_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/breaker"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/handlers"
)

// fakeAPI answers /status/<code> with that code; /slow blocks until the
// client gives up. It counts requests.
func fakeAPI(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		_, _ = io.WriteString(w, "charged")
	})
	mux.HandleFunc("/status/{code}", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if v := r.URL.Query().Get("retry-after"); v != "" {
			w.Header().Set("Retry-After", v)
		}
		switch r.PathValue("code") {
		case "404":
			http.Error(w, "no such customer", http.StatusNotFound)
		case "429":
			http.Error(w, "slow down", http.StatusTooManyRequests)
		case "500":
			http.Error(w, "boom", http.StatusInternalServerError)
		case "503":
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
		}
	})
	mux.HandleFunc("/slow", func(_ http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		<-r.Context().Done()
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, &hits
}

func breakersCtx(t *testing.T, s breaker.Settings) (context.Context, *breaker.Registry) {
	t.Helper()
	r, err := breaker.New(breaker.WithSettings("api", s))
	if err != nil {
		t.Fatal(err)
	}
	return breaker.ContextWithRegistry(t.Context(), r), r
}

func get(t *testing.T, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func TestDoHTTPSuccess(t *testing.T) {
	t.Parallel()
	srv, _ := fakeAPI(t)
	ctx, _ := breakersCtx(t, breaker.Settings{})
	c := &handlers.HTTPClient{Client: srv.Client(), Dependency: "api"}
	resp, err := c.Do(ctx, get(t, srv.URL+"/ok"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b, _ := io.ReadAll(resp.Body); string(b) != "charged" {
		t.Fatalf("body %q", b)
	}
}

func TestDoHTTPClientErrorsArePermanentAndNotCounted(t *testing.T) {
	t.Parallel()
	srv, hits := fakeAPI(t)
	ctx, r := breakersCtx(t, breaker.Settings{ConsecutiveFailures: 2})
	for range 5 {
		_, err := handlers.DoHTTP(ctx, srv.Client(), "api", get(t, srv.URL+"/status/404?token=secret"))
		var he *handlers.HTTPError
		if !framework.IsPermanent(err) || !errors.As(err, &he) || he.StatusCode != http.StatusNotFound || he.Retryable() {
			t.Fatalf("404: err = %v, want a permanent HTTPError", err)
		}
		if he.Body != "no such customer\n" || he.URL != srv.URL+"/status/404" {
			t.Fatalf("error = %+v (the query must be redacted)", he)
		}
	}
	in, _ := r.State("api")
	if in.State != breaker.StateClosed || in.Counts.Failures != 0 || in.Counts.Successes != 5 || hits.Load() != 5 {
		t.Fatalf("after five 404s: %+v, hits %d", in, hits.Load())
	}
}

func TestDoHTTPServerErrorsTripTheBreaker(t *testing.T) {
	t.Parallel()
	srv, hits := fakeAPI(t)
	ctx, r := breakersCtx(t, breaker.Settings{ConsecutiveFailures: 2, OpenTimeout: time.Minute})
	_, err := handlers.DoHTTP(ctx, srv.Client(), "api", get(t, srv.URL+"/status/500"))
	var he *handlers.HTTPError
	if framework.IsPermanent(err) || !errors.As(err, &he) || he.StatusCode != 500 || !he.Retryable() {
		t.Fatalf("500: %v", err)
	}
	_, err = handlers.DoHTTP(ctx, srv.Client(), "api", get(t, srv.URL+"/status/500"))
	if !errors.Is(err, breaker.ErrOpen) || !errors.As(err, &he) {
		t.Fatalf("tripping 500: %v, want breaker.ErrOpen wrapping the HTTPError", err)
	}
	_, err = handlers.DoHTTP(ctx, srv.Client(), "api", get(t, srv.URL+"/ok"))
	if !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("call on an open breaker: %v", err)
	}
	if hits.Load() != 2 {
		t.Fatalf("the server saw %d requests, want 2: the open breaker must not send", hits.Load())
	}
	if in, _ := r.State("api"); in.State != breaker.StateOpen {
		t.Fatalf("state %v", in.State)
	}
}

func TestDoHTTPRetryAfter(t *testing.T) {
	t.Parallel()
	srv, _ := fakeAPI(t)
	date := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	due, err := http.ParseTime(date) // whole seconds
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		path string
		want time.Duration // 0: no RetryAfterError
		tol  time.Duration
	}{
		{"503 seconds", "/status/503?retry-after=7", 7 * time.Second, 0},
		{"429 date", "/status/429?retry-after=" + urlEscape(date), 90 * time.Second, 3 * time.Second},
		{"429 without header", "/status/429", 0, 0},
		{"503 garbage", "/status/503?retry-after=soon", 0, 0},
		{"503 seconds beyond a year", "/status/503?retry-after=31536001", 0, 0},
		{"503 date beyond a year", "/status/503?retry-after=" + urlEscape("Fri, 31 Dec 9999 23:59:59 GMT"), 0, 0},
		{"500 ignores it", "/status/500?retry-after=7", 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, _ := breakersCtx(t, breaker.Settings{})
			before := time.Now()
			_, err := handlers.DoHTTP(ctx, srv.Client(), "api", get(t, srv.URL+tc.path))
			after := time.Now()
			var he *handlers.HTTPError
			if !errors.As(err, &he) || framework.IsPermanent(err) {
				t.Fatalf("err = %v, want a retryable HTTPError", err)
			}
			var ra *framework.RetryAfterError
			got := errors.As(err, &ra)
			if tc.want == 0 {
				if got {
					t.Fatalf("unexpected RetryAfterError %v", ra)
				}
				return
			}
			lo, hi := tc.want, tc.want
			if tc.tol > 0 {
				// A date: the delay is the time left until it, measured
				// during the call, however slow the machine.
				lo, hi = due.Sub(after), due.Sub(before)
			}
			if !got || ra.Delay < lo || ra.Delay > hi {
				t.Fatalf("err = %v, want retry after %v to %v", err, lo, hi)
			}
		})
	}
}

func TestDoHTTPTimeoutCounts(t *testing.T) {
	t.Parallel()
	srv, _ := fakeAPI(t)
	ctx, r := breakersCtx(t, breaker.Settings{ConsecutiveFailures: 1})
	client := srv.Client()
	client.Timeout = 50 * time.Millisecond
	_, err := handlers.DoHTTP(ctx, client, "api", get(t, srv.URL+"/slow"))
	if err == nil || framework.IsPermanent(err) || !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("timeout: %v, want a failure that opened the breaker", err)
	}
	if in, _ := r.State("api"); in.State != breaker.StateOpen || in.OpenedAt.IsZero() {
		t.Fatalf("after a timeout: %+v", in)
	}
}

func TestDoHTTPWithoutRegistry(t *testing.T) {
	t.Parallel()
	srv, hits := fakeAPI(t)
	_, err := handlers.DoHTTP(t.Context(), srv.Client(), "api", get(t, srv.URL+"/ok"))
	if !errors.Is(err, breaker.ErrNoRegistry) || hits.Load() != 0 {
		t.Fatalf("err = %v, hits %d", err, hits.Load())
	}
}

func urlEscape(s string) string {
	out := make([]byte, 0, len(s)*3)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			out = append(out, c)
			continue
		}
		const hex = "0123456789ABCDEF"
		out = append(out, '%', hex[c>>4], hex[c&15])
	}
	return string(out)
}
