package fairness

import (
	"context"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/deadletter"
	"github.com/jetflow-io/jetflow/internal/topology"
)

// pluginName names the plugin on the worker.
const pluginName = "fairness"

// Install makes w move the staged tasks ([Enqueue]) of each type it
// handles with [Shares] to the type's work subjects, with fair shares
// between keys. Start creates the fair stream when it is missing. Install
// it on every worker of such a type: each worker's mover fills the type's
// queue in the task stream, and several movers at once move each task
// once. A staged message that cannot be a task (invalid subject, key or
// ID) is dead-lettered with reason "invalid". Call it before Start; it
// panics when called twice on one worker or after Start.
func Install(w *framework.Worker) error {
	m := &mover{wake: make(chan struct{}, 1), types: map[string]*fairType{}}
	w.Use(framework.Plugin{
		Name:  pluginName,
		Value: m,
		Keys:  []any{typeKey{}},
		Prepare: func(ctx context.Context, w *framework.Worker) error {
			names := w.Names()
			for _, t := range w.Types() {
				if vs := w.HandlerValues(t, typeKey{}); len(vs) > 0 {
					ft := &fairType{name: t, o: vs[len(vs)-1].(Options)}
					ft.depth.Store(int64(ft.o.Depth))
					m.types[t] = ft
				}
			}
			if len(m.types) == 0 {
				return nil
			}
			if err := ensureStream(ctx, w.JetStream(), names); err != nil {
				return err
			}
			s, err := w.JetStream().Stream(ctx, names.FairStream())
			if err != nil {
				return err
			}
			m.nc, m.js, m.names, m.log, m.stream = w.Conn(), w.JetStream(), names, w.Logger(), s
			m.core = deadletter.NewCore(w.Conn(), w.JetStream(), topology.DeadLetterTopology(names), w.Logger())
			return nil
		},
		Service: func(ctx context.Context, _ *framework.Worker) {
			if len(m.types) > 0 {
				m.run(ctx)
			}
		},
		Finished: func(_ context.Context, t *framework.Task, _ framework.Outcome) {
			m.finished(t.Type)
		},
	})
	return nil
}
