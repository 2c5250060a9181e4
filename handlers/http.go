package handlers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jetflow-io/jetflow/breaker"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/ratelimit"
)

// HTTPError is a non-success answer of an HTTP dependency, returned by
// [DoHTTP] (wrapped: see there).
type HTTPError struct {
	// Dependency is the dependency's name.
	Dependency string
	// Method and URL identify the request; the URL has no query, fragment
	// or user info.
	Method string
	URL    string
	// StatusCode and Status are the response's.
	StatusCode int
	Status     string
	// Body is the start of the response body (at most [MaxErrorBody]
	// bytes), for diagnosis.
	Body string
}

// MaxErrorBody is how many bytes of an error response [DoHTTP] keeps in
// [HTTPError.Body].
const MaxErrorBody = 512

// Error describes the failure; it implements the error interface.
func (e *HTTPError) Error() string {
	msg := fmt.Sprintf("handlers: %s %s %s: %s", e.Dependency, e.Method, e.URL, e.Status)
	if b := strings.TrimSpace(e.Body); b != "" {
		msg += ": " + b
	}
	return msg
}

// Retryable reports whether the status is worth retrying: 408, 425, 429 and
// every 5xx.
func (e *HTTPError) Retryable() bool { return retryableStatus(e.StatusCode) }

func retryableStatus(code int) bool {
	switch {
	case code == http.StatusRequestTimeout, code == http.StatusTooEarly, code == http.StatusTooManyRequests:
		return true
	}
	return code >= 500
}

// DoHTTP sends req with client (nil means [http.DefaultClient]) through the
// circuit breaker of dependency dep ([breaker.Call]), bound to ctx. Call
// it from a handler of a worker that breakers are installed on
// ([breaker.Install]), or with a registry set by
// [breaker.ContextWithRegistry]; otherwise it returns
// [breaker.ErrNoRegistry] without sending anything.
//
// A response below 400 is returned as is; the caller must close its body.
// Otherwise the body is read (up to [MaxErrorBody] bytes), closed, and the
// error decides the task's fate when the handler returns it:
//
//   - 408, 425, 429 and 5xx: an *[HTTPError], retried with backoff and
//     counted as a breaker failure; on 429 and 503 a Retry-After header (in
//     seconds or as a date, at most a year away; a longer one is ignored)
//     becomes [framework.RetryAfterErr], so the retry waits as long as the
//     dependency asked. On 429 with Retry-After, a
//     dependency with a cluster-wide rate limit
//     ([ratelimit.WithDependency]) is also paused for every worker
//     ([ratelimit.Throttle]).
//   - any other 4xx: [framework.Permanent] of an *[HTTPError]: the request
//     is wrong and retrying cannot help. It does not count as a breaker
//     failure: the dependency answered.
//   - transport errors, timeouts included: retried and counted as failures.
//     Set client.Timeout (or a ctx deadline) so that a hung dependency is a
//     failure rather than a stuck task.
//
// Once the breaker is open, DoHTTP returns a *[breaker.OpenError]
// without sending anything, and a handler returning it is rerun when the
// breaker lets probes through again, without spending an attempt.
func DoHTTP(ctx context.Context, client *http.Client, dep string, req *http.Request) (*http.Response, error) {
	if client == nil {
		client = http.DefaultClient
	}
	if req == nil {
		return nil, framework.Permanent(fmt.Errorf("handlers: %s: nil request", dep))
	}
	var resp *http.Response
	err := breaker.Call(ctx, dep, func(ctx context.Context) error {
		r, err := client.Do(req.WithContext(ctx))
		if err != nil {
			return fmt.Errorf("handlers: %s %s %s: %w", dep, req.Method, redact(req), err)
		}
		if r.StatusCode < 400 {
			resp = r
			return nil
		}
		return statusError(dep, req, r)
	})
	if err != nil {
		throttleOn429(ctx, dep, err)
		return nil, err
	}
	return resp, nil
}

// throttleOn429 passes the Retry-After of a 429 answer to the cluster-wide
// rate limit of dep ([ratelimit.Throttle]), so that every worker slows
// down, not only this task.
func throttleOn429(ctx context.Context, dep string, err error) {
	var he *HTTPError
	var ra *framework.RetryAfterError
	if !errors.As(err, &he) || he.StatusCode != http.StatusTooManyRequests || !errors.As(err, &ra) {
		return
	}
	if terr := ratelimit.Throttle(ctx, dep, ra.Delay); terr != nil {
		if t := framework.TaskFromContext(ctx); t != nil {
			t.Logger().Warn("jetflow could not throttle the dependency after a 429", slog.String(framework.LogKeyDependency, dep),
				slog.Any(framework.LogKeyError, terr))
		}
	}
}

// HTTPClient sends requests to one dependency through its circuit breaker.
// The zero value of Client means [http.DefaultClient].
type HTTPClient struct {
	// Client sends the requests. Default [http.DefaultClient].
	Client *http.Client
	// Dependency names the breaker. Required.
	Dependency string
}

// Do is [DoHTTP] with c's client and dependency.
func (c *HTTPClient) Do(ctx context.Context, req *http.Request) (*http.Response, error) {
	return DoHTTP(ctx, c.Client, c.Dependency, req)
}

func statusError(dep string, req *http.Request, r *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(r.Body, MaxErrorBody))
	// Drain a little more so the connection can be reused, then close.
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 64<<10))
	_ = r.Body.Close()
	he := &HTTPError{Dependency: dep, Method: req.Method, URL: redact(req), StatusCode: r.StatusCode,
		Status: r.Status, Body: string(body)}
	if !retryableStatus(r.StatusCode) {
		return framework.Permanent(he)
	}
	if r.StatusCode == http.StatusTooManyRequests || r.StatusCode == http.StatusServiceUnavailable {
		if d, ok := parseRetryAfter(r.Header.Get("Retry-After"), time.Now()); ok {
			return framework.RetryAfterErr(d, he)
		}
	}
	return he
}

// parseRetryAfter reads a Retry-After value: delay-seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 || secs > int64(maxRetryAfter/time.Second) {
			return 0, false
		}
		return time.Duration(secs) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		// The bound of delay-seconds applies to a date too: a dependency
		// answering "Dec 31 9999" would otherwise park the task, and the
		// dependency's rate limit, for the longest duration Go has.
		d := t.Sub(now)
		if d > maxRetryAfter {
			return 0, false
		}
		return max(d, 0), true
	}
	return 0, false
}

// maxRetryAfter is the longest Retry-After honoured; a longer one is ignored
// and the task retries with its backoff.
const maxRetryAfter = 365 * 24 * time.Hour

// redact returns the request URL without user info, query or fragment,
// which may carry secrets.
func redact(req *http.Request) string {
	if req.URL == nil {
		return ""
	}
	u := *req.URL
	u.User = nil
	u.RawQuery = ""
	u.ForceQuery = false
	u.Fragment = ""
	u.RawFragment = ""
	return u.String()
}
