package ui

import (
	"log/slog"
	"net/http"
)

// workers answers GET api/workers: the worker registry
// (inspect.Operator.Workers) as {"workers": [...], "registry": bool, ...}.
func (h *handler) workers(w http.ResponseWriter, r *http.Request) {
	f, err := h.op.Workers(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, f)
}

// countWorkers sets the live worker count and the no-worker flag of ov's
// queues from the worker registry. A registry that cannot be read leaves
// ov.Registry false (counts unknown) and is logged; the overview is still
// served.
func (h *handler) countWorkers(r *http.Request, ov *Overview) {
	f, err := h.op.Workers(r.Context())
	if err != nil {
		h.opts.Logger.Warn("jetflow dashboard: worker registry not read", slog.Any("error", err))
		return
	}
	ov.Registry = f.Registry
	if !f.Registry {
		return
	}
	for i := range ov.Queues {
		q := &ov.Queues[i]
		for _, wk := range f.Workers {
			for _, t := range wk.Types {
				if t.Type != q.Type {
					continue
				}
				for _, p := range t.Priorities {
					if p.String() == q.Priority {
						q.Workers++
					}
				}
			}
		}
		q.NoWorker = q.Workers == 0 && q.Waiting > 0
	}
}
