// Package debounce runs a burst of enqueues of one key once: the last
// payload, after the key has been quiet for a window, and never later than a
// maximum wait after the burst's first enqueue.
//
//	// Producer: many edits of one document within a second rebuild its index once.
//	_, err := debounce.Enqueue(ctx, client, "search.reindex", doc,
//		debounce.Options{Key: doc.ID, Window: time.Second, MaxWait: 10 * time.Second})
//
//	// Worker: Install before Start.
//	err = debounce.Install(w)
//	w.HandleFunc("search.reindex", reindex)
//
// It is not a dedup. framework.Unique keeps the first enqueue of a key and
// drops the others for a period; framework.WithID drops a retried enqueue
// of the same ID. A debounce keeps the last, and runs again for the next
// burst.
//
// How it works: [Enqueue] writes the key's record (the burst's first time and
// its last enqueue, payload included) in the debounce bucket
// ([github.com/jetflow-io/jetflow/streams.Names.DebounceBucket]) with
// compare-and-set, and enqueues a check, a delayed task of the same type due
// a window later, or [Lead] before the maximum wait if that is sooner. The worker's
// plugin takes each check before the handler: the check of the last enqueue,
// or any check at the maximum wait, enqueues the run (the record's payload,
// the check's priority, the key as its task key, ID "db-" and the last
// enqueue's ID, so that a check run twice enqueues it once) and deletes the
// record; any other check ends there. The run is an ordinary task, with its
// retries. Checks ride on the server's schedules: a window is at least the
// delay of a delayed task (tens of milliseconds).
//
// With [Options].Collect the record keeps every payload of the burst, and
// the run's payload is their JSON array, in enqueue order (the handler
// takes a slice); a burst of [MaxCollected] payloads or [MaxCollectedBytes]
// runs at once.
//
// Limits: the payload is JSON (the default codec) or []byte; a producer
// needs the bucket (a tenant producer without the JetStream API cannot
// debounce); the run carries the priority and the key, not other enqueue
// options (uniqueness, ordering); an enqueue that lands between a run's
// enqueue and its record's deletion makes a second run with its payload.
package debounce
