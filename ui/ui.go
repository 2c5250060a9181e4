package ui

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/workflow"
)

//go:embed assets
var assets embed.FS

// Options configure the dashboard. The zero value is usable.
type Options struct {
	// Prefix is the jetflow topology prefix ([framework.WithPrefix]).
	// Default "jetflow".
	Prefix string
	// ReadOnly refuses every mutation (replay, purge, pause, resume,
	// cancel, resolving a blocked ordering key) with 403 Forbidden, and the pages hide their buttons.
	ReadOnly bool
	// Logger receives errors of the JetStream queries behind the pages.
	// Default: discard.
	Logger *slog.Logger
	// RefreshInterval is how often the pages poll the API. Default 2 s,
	// at least 250 ms. The overview (queues, the costliest read: it scans
	// the delayed tasks) is read from JetStream at most once per half
	// interval (at most once a second), whatever the number of open pages
	// and metric scrapes; mutations refresh it.
	RefreshInterval time.Duration
	// Title is shown in the page header. Default "jetflow".
	Title string
}

// DefaultRefreshInterval is the default [Options.RefreshInterval].
const DefaultRefreshInterval = 2 * time.Second

// RequestHeader must be set, to any value, on every mutating request of the
// JSON API. A browser sends a custom header cross-origin only after a CORS
// preflight the dashboard never grants, so a page on another site cannot
// make a logged-in operator's browser replay or purge anything.
const RequestHeader = "X-Jetflow-Request"

// New returns the dashboard on nc as an [http.Handler]: the pages at "/",
// their JSON API under "/api/", and queue gauges in the Prometheus text
// format at "/metrics". Mount it under any path with [http.StripPrefix];
// the pages use relative URLs. It does no authentication: wrap it in the
// embedding application's own. Served without any, check the request's
// Host as `jetflow ui` does (DNS rebinding makes a page on another site,
// its name resolved again to the dashboard's address, same-origin with it).
// The handler is safe for concurrent use.
//
// New needs no topology to exist; pages report what is missing.
func New(nc *nats.Conn, opts Options) (http.Handler, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: nil connection", framework.ErrInvalidOption)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.RefreshInterval == 0 {
		opts.RefreshInterval = DefaultRefreshInterval
	}
	if opts.RefreshInterval < 250*time.Millisecond {
		return nil, fmt.Errorf("%w: refresh interval %v below 250ms", framework.ErrInvalidOption, opts.RefreshInterval)
	}
	if opts.Title == "" {
		opts.Title = "jetflow"
	}
	var fopts []framework.ClientOption
	if opts.Prefix != "" {
		fopts = append(fopts, framework.WithPrefix(opts.Prefix))
	}
	fopts = append(fopts, framework.WithLogger(opts.Logger))
	fc, err := framework.NewClient(nc, fopts...)
	if err != nil {
		return nil, err
	}
	wc, err := workflow.NewClient(fc)
	if err != nil {
		return nil, err
	}
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	h := &handler{opts: opts, fc: fc, ins: fc.Inspector(), op: inspect.New(fc), wf: wc, mux: http.NewServeMux(),
		cacheFor: min(opts.RefreshInterval/2, time.Second)}
	h.routes(http.FileServerFS(static))
	return h, nil
}

type handler struct {
	opts Options
	fc   *framework.Client
	ins  *framework.Inspector
	op   *inspect.Operator
	wf   *workflow.Client
	mux  *http.ServeMux

	// The overview is the costly read (it scans delayed tasks); concurrent
	// pages and scrapes share one read per cacheFor.
	cacheFor time.Duration
	cacheMu  sync.Mutex
	cached   *Overview
	cachedAt time.Time
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "" {
		// Mounted with StripPrefix and asked without the trailing slash:
		// the pages' relative URLs need it.
		loc, _, _ := strings.Cut(r.RequestURI, "?")
		loc += "/"
		if r.URL.RawQuery != "" {
			loc += "?" + r.URL.RawQuery
		}
		http.Redirect(w, r, loc, http.StatusMovedPermanently)
		return
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "same-origin")
	h.mux.ServeHTTP(w, r)
}

func (h *handler) routes(static http.Handler) {
	m := h.mux
	m.Handle("GET /", static)
	m.HandleFunc("GET /metrics", h.metrics)
	m.HandleFunc("GET /api/config", h.config)
	m.HandleFunc("GET /api/overview", h.overview)
	m.HandleFunc("GET /api/scheduled", h.scheduled)
	m.HandleFunc("GET /api/tasks/{id}", h.task)
	m.HandleFunc("POST /api/tasks/{id}/cancel", h.mutation(h.cancelTask))
	m.HandleFunc("GET /api/dlq", h.deadLetters)
	m.HandleFunc("GET /api/dlq/{seq}", h.deadLetter)
	m.HandleFunc("POST /api/dlq/{seq}/replay", h.mutation(h.replayOne))
	m.HandleFunc("POST /api/dlq/replay", h.mutation(h.replayFilter))
	m.HandleFunc("POST /api/dlq/purge", h.mutation(h.purge))
	m.HandleFunc("GET /api/cron", h.cron)
	m.HandleFunc("GET /api/breakers", h.breakers)
	m.HandleFunc("POST /api/queues/{type}/{priority}/pause", h.mutation(h.pause))
	m.HandleFunc("POST /api/queues/{type}/{priority}/resume", h.mutation(h.resume))
	m.HandleFunc("GET /api/ordering", h.ordering)
	m.HandleFunc("POST /api/ordering/{type}/{id}/resolve", h.mutation(h.resolveBlocked))
	m.HandleFunc("GET /api/limits", h.limits)
	m.HandleFunc("GET /api/unique", h.unique)
	m.HandleFunc("GET /api/tenants", h.tenants)
	m.HandleFunc("GET /api/workers", h.workers)
	m.HandleFunc("GET /api/workflows", h.workflows)
	m.HandleFunc("GET /api/workflows/{id}", h.workflowRun)
	m.HandleFunc("GET /api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, errors.New("no such API endpoint"))
	})
}

// mutation guards a mutating endpoint: read-only mode and the request
// header.
func (h *handler) mutation(fn http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.opts.ReadOnly {
			writeError(w, http.StatusForbidden, errors.New("the dashboard is read-only"))
			return
		}
		if r.Header.Get(RequestHeader) == "" {
			writeError(w, http.StatusForbidden, fmt.Errorf("missing %s header", RequestHeader))
			return
		}
		defer h.invalidate()
		fn(w, r)
	}
}

// apiError is the body of every error answer.
type apiError struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, err error) {
	writeJSON(w, status, apiError{Error: err.Error()})
}

// fail answers err with the status its kind calls for, logging server
// errors.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, framework.ErrInvalidOption), errors.Is(err, errBadRequest):
		status = http.StatusBadRequest
	case errors.Is(err, framework.ErrNotFound), errors.Is(err, workflow.ErrRunNotFound):
		status = http.StatusNotFound
	case errors.Is(err, framework.ErrNotCancellable):
		status = http.StatusConflict
	case errors.Is(err, framework.ErrTopologyMissing):
		status = http.StatusServiceUnavailable
	}
	if status >= 500 {
		h.opts.Logger.Error("jetflow dashboard query failed", slog.String("path", r.URL.Path), slog.Any("error", err))
	}
	writeError(w, status, err)
}

var errBadRequest = errors.New("bad request")
