package keylimit

import "github.com/jetflow-io/jetflow/framework"

// Lanes ([framework.Ordering].Lanes) cap each key in the memory of the
// lane's one owner, with no slot in the bucket; LaneLimit gives them the
// overrides stored with [Set], so that an operator changes a key's cap in
// lanes as in [PerKey], from the CLI or the API, without a restart.

// LaneLimit returns the limit function of the lanes of taskType
// ([framework.Ordering].Limit): the override stored with [Set] for the
// task's ordering key ([framework.Ordered]), else the type's override,
// else 0, which leaves the lanes' own PerKey. w must have [Install]; the
// overrides are read from the worker's start on, and a change applies to
// the tasks started after it reaches the worker, within a moment.
//
//	keylimit.Install(w)
//	w.HandleFunc("tenant.export", export, framework.WithOrdering(framework.Ordering{
//		Lanes: 16, PerKey: 2, Limit: keylimit.LaneLimit(w, "tenant.export"),
//	}))
//
// Call it before Start; it panics when w has no [Install].
func LaneLimit(w *framework.Worker, taskType string) func(key string) int {
	v, ok := w.Plugin(pluginName)
	if !ok {
		panic("keylimit.LaneLimit needs keylimit.Install")
	}
	x := v.(*limiter)
	x.mu.Lock()
	if x.laneTypes == nil {
		x.laneTypes = make(map[string]bool)
	}
	x.laneTypes[taskType] = true
	x.mu.Unlock()
	return func(key string) int {
		ov := x.lanes.Load()
		if ov == nil {
			return 0
		}
		return ov.limit(taskType, key, 0)
	}
}
