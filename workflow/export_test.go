package workflow

// MemoHits is how many document reads the process's document memo has
// answered so far (decision 032).
func MemoHits() int64 { return docs.hits.Load() }
