package fairness

import "slices"

// take is one key's turn in a round: move up to n of its first staged
// tasks, stored on subject.
type take struct {
	subject string
	n       int
}

// turns is the round-robin over the keys of one type and priority. It keeps
// where the last round stopped, within a key's turn too, so that rounds
// smaller than the number of keys or than a weight still serve every key in
// turn. It is not safe for concurrent use.
type turns struct {
	last string // subject of the last key served
	used int    // tasks of last's turn moved so far
}

// plan returns the turns of one round of at most budget tasks over the
// keys with staged tasks (waiting: subject to count), in subject order,
// going on from where the last round stopped: each key gets up to its
// weight (weight(subject), at least 1) per turn and no more than it has
// waiting, then the next key, wrapping around, until the budget is spent
// or every key had all it has. A key with a large backlog gets its weight
// per turn, however many tasks it has. A key's turns in one round are
// merged into one take, in the order of its first turn.
func (r *turns) plan(waiting map[string]uint64, budget int, weight func(subject string) int) []take {
	if budget <= 0 || len(waiting) == 0 {
		return nil
	}
	keys := make([]string, 0, len(waiting))
	left := make(map[string]uint64, len(waiting))
	for s, n := range waiting {
		if n > 0 {
			keys = append(keys, s)
			left[s] = n
		}
	}
	if len(keys) == 0 {
		return nil
	}
	slices.Sort(keys)
	w := func(s string) int { return max(weight(s), 1) }
	cur, found := slices.BinarySearch(keys, r.last)
	used := 0
	if found {
		if r.used < w(r.last) {
			used = r.used // the last key's turn goes on
		} else {
			cur++
		}
	}
	var out []take
	idx := make(map[string]int) // subject → index in out
	for idle := 0; budget > 0 && idle < len(keys); {
		s := keys[cur%len(keys)]
		n := min(uint64(w(s)-used), left[s], uint64(budget))
		if n == 0 {
			idle++
			cur, used = cur+1, 0
			continue
		}
		idle = 0
		left[s] -= n
		budget -= int(n)
		used += int(n)
		r.last, r.used = s, used
		if left[s] == 0 {
			r.used = w(s) // nothing more now: its turn is over
		}
		if j, ok := idx[s]; ok {
			out[j].n += int(n)
		} else {
			idx[s] = len(out)
			out = append(out, take{subject: s, n: int(n)})
		}
		if used >= w(s) || left[s] == 0 {
			cur, used = cur+1, 0
		}
	}
	return out
}
