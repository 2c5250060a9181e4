package keylimit

// LimitOf returns the limit the worker's plugin value v applies to key of
// taskType now.
func LimitOf(v any, taskType, key string) int {
	x := v.(*limiter)
	return x.ov.limit(taskType, key, x.limits[taskType])
}
