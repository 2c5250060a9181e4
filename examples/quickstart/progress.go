package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jetflow-io/jetflow/framework"
)

// progress prints one line per task event and counts the outcomes of the
// tasks enqueued by this run, per type. It learns about tasks from the
// client's Enqueued hook and follows them through the worker's hooks; tasks
// it did not see enqueued (published with the nats CLI, or left over in a
// kept store) are printed but not counted. Hooks run on task goroutines, so
// everything is guarded by mu.
type progress struct {
	mu       sync.Mutex
	out      io.Writer     // held until live is called, then the real output
	held     *bytes.Buffer // lines printed before live
	dst      io.Writer
	start    time.Time
	planned  map[string]bool // labels of the tasks meant to fail
	tasks    map[string]*taskState
	order    []string // task types in enqueue order
	byType   map[string]*counts
	left     int
	counting bool // false once every counted task finished
	allDone  chan struct{}
}

type taskState struct {
	typ      string
	label    string
	finished bool
	failed   bool
}

type counts struct {
	prio                  framework.Priority
	done, retries, failed int
}

func newProgress(out io.Writer, plannedFailures ...string) *progress {
	held := new(bytes.Buffer)
	p := &progress{
		out:      held,
		held:     held,
		dst:      out,
		start:    time.Now(),
		planned:  make(map[string]bool),
		tasks:    make(map[string]*taskState),
		byType:   make(map[string]*counts),
		counting: true,
		allDone:  make(chan struct{}),
	}
	for _, l := range plannedFailures {
		p.planned[l] = true
	}
	return p
}

// live prints header, then the lines held so far, and prints every later
// line as it happens.
func (p *progress) live(header string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	io.WriteString(p.dst, header)
	p.held.WriteTo(p.dst)
	p.out = p.dst
}

func (p *progress) hooks() framework.Hooks {
	return framework.Hooks{
		Enqueued: func(_ context.Context, info framework.TaskInfo) {
			p.mu.Lock()
			defer p.mu.Unlock()
			if !p.counting || info.Duplicate {
				return
			}
			if _, ok := p.byType[info.Type]; !ok {
				p.byType[info.Type] = &counts{prio: info.Priority}
				p.order = append(p.order, info.Type)
			}
			p.tasks[info.ID] = &taskState{typ: info.Type}
			p.left++
		},
		Started: func(_ context.Context, t *framework.Task) {
			extra := ""
			if !t.ScheduledFor.IsZero() {
				extra = fmt.Sprintf("  (delayed; started %v after its due time)",
					time.Since(t.ScheduledFor).Round(time.Millisecond))
			}
			p.line(t, "start", fmt.Sprintf("attempt %d/%d%s", t.Attempt, t.MaxAttempts, extra))
		},
		Finished: func(_ context.Context, t *framework.Task, o framework.Outcome) {
			switch o.Action {
			case framework.ActionAck:
				p.line(t, "done", "in "+o.Took.Round(time.Millisecond).String())
				p.finish(t, false)
			case framework.ActionRetry:
				p.line(t, "retry", fmt.Sprintf("%v; next attempt in %v", o.Err, o.Delay.Round(time.Millisecond)))
				p.mu.Lock()
				defer p.mu.Unlock()
				if s, ok := p.tasks[t.ID]; ok && !s.finished {
					p.byType[s.typ].retries++
				}
			case framework.ActionFail:
				p.line(t, "FAILED", o.Err.Error())
				p.finish(t, true)
			}
		},
	}
}

func (p *progress) finish(t *framework.Task, failed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.tasks[t.ID]
	if !ok || s.finished {
		return
	}
	s.finished, s.failed = true, failed
	if failed {
		p.byType[s.typ].failed++
	} else {
		p.byType[s.typ].done++
	}
	p.left--
	if p.left == 0 && p.counting {
		p.counting = false
		close(p.allDone)
	}
}

// describe names a task by its payload, for the progress lines only.
func describe(t *framework.Task) string {
	var v struct {
		OrderID  string `json:"order_id"`
		To       string `json:"to"`
		Template string `json:"template"`
		Name     string `json:"name"`
		Period   string `json:"period"`
	}
	if json.Unmarshal(t.Payload, &v) != nil {
		return t.ID
	}
	switch {
	case v.OrderID != "":
		return v.OrderID
	case v.To != "":
		return v.Template + " " + v.To
	case v.Name != "":
		return v.Name + "/" + v.Period
	}
	return t.ID
}

func (p *progress) line(t *framework.Task, event, detail string) {
	label := describe(t)
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.tasks[t.ID]; ok {
		s.label = label
	}
	fmt.Fprintf(p.out, "%6.2fs  %-6s  %-15s  %-8s  %-34s  %s\n",
		time.Since(p.start).Seconds(), event, t.Type, t.Priority, label, detail)
}

func (p *progress) statsLine(s framework.Stats) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, "%6.2fs  ------  %d/%d finished; worker: running %d, succeeded %d, retried %d, failed %d\n",
		time.Since(p.start).Seconds(), len(p.tasks)-p.left, len(p.tasks), s.Running, s.Succeeded, s.Retried, s.Failed)
}

func (p *progress) total() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.tasks)
}

func (p *progress) remaining() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.left
}

// breakdown says how many tasks of each type were enqueued.
func (p *progress) breakdown() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := make(map[string]int)
	for _, s := range p.tasks {
		n[s.typ]++
	}
	parts := make([]string, 0, len(p.order))
	for _, typ := range p.order {
		parts = append(parts, fmt.Sprintf("%d %s (%s)", n[typ], typ, p.byType[typ].prio))
	}
	return strings.Join(parts, ", ")
}

// missing lists the unfinished tasks.
func (p *progress) missing() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for id, s := range p.tasks {
		if !s.finished {
			name := s.label
			if name == "" {
				name = "task " + id + ", never started"
			}
			out = append(out, s.typ+" "+name)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// summary prints the table and checks that every task ended as planned.
func (p *progress) summary() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	elapsed := time.Since(p.start).Round(10 * time.Millisecond)
	fmt.Fprintf(p.out, "\nsummary after %v:\n\n", elapsed)
	tw := tabwriter.NewWriter(p.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  TYPE\tPRIORITY\tDONE\tRETRIES\tFAILED")
	var done, retries, failed int
	for _, typ := range p.order {
		c := p.byType[typ]
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%d\n", typ, c.prio, c.done, c.retries, c.failed)
		done, retries, failed = done+c.done, retries+c.retries, failed+c.failed
	}
	fmt.Fprintf(tw, "  total\t\t%d\t%d\t%d\n", done, retries, failed)
	tw.Flush()
	var surprises []string
	for _, s := range p.tasks {
		if s.failed != p.planned[s.label] {
			surprises = append(surprises, fmt.Sprintf("%s %s (failed: %v, planned to fail: %v)",
				s.typ, s.label, s.failed, p.planned[s.label]))
		}
	}
	if len(surprises) > 0 {
		sort.Strings(surprises)
		return fmt.Errorf("%d tasks ended differently than planned: %s", len(surprises), strings.Join(surprises, "; "))
	}
	fmt.Fprintf(p.out, "\nall %d tasks finished in %v: %d done, %d retries, %d failed as planned\n",
		done+failed, elapsed, done, retries, failed)
	return nil
}
