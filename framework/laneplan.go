package framework

import (
	"context"

	"github.com/jetflow-io/jetflow/internal/lanes"
)

// newLanePlan returns the worker's plan of which lanes of ordered types it
// pulls (lanes.Plan): the worker registry says which workers serve each
// type.
func (w *Worker) newLanePlan() *lanes.Plan {
	return &lanes.Plan{Self: w.opts.fleet.id, Ctx: w.hardCtx, List: func(ctx context.Context) (map[string][]string, error) {
		ls, err := fleetRules.List(ctx, w.js, w.names.WorkersBucket())
		if err != nil {
			return nil, err
		}
		serving := make(map[string][]string)
		for _, rec := range ls.Records {
			for _, s := range rec.Types {
				serving[s.Type] = append(serving[s.Type], rec.ID)
			}
		}
		return serving, nil
	}}
}
