package ratelimit

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// Gate admits tasks through limiters. A task whose permit is not due within
// its limit's horizon is set aside; its permit is kept, under the task's
// key, for the rerun.
type Gate struct {
	held sync.Map // key → *Permit
}

// Admit waits until the permit of key under l is due, or reports how long
// to set the task aside (hold > 0). A nil error with hold 0 means go.
func (g *Gate) Admit(ctx context.Context, l *Limiter, key any) (hold time.Duration, err error) {
	var p *Permit
	if v, ok := g.held.Load(key); ok {
		p = v.(*Permit)
	} else {
		p = l.Request()
		g.held.Store(key, p)
	}
	h := l.lim.Horizon()
	timer := time.NewTimer(h)
	select {
	case <-p.ready:
		timer.Stop()
	case <-timer.C:
		return h + rand.N(h), nil
	case <-ctx.Done():
		timer.Stop()
		return 0, ctx.Err()
	}
	if wait := time.Until(l.Due(p)); wait > h {
		return wait, nil
	}
	if err := SleepUntil(ctx, l.Due(p)); err != nil {
		return 0, err
	}
	g.held.Delete(key)
	return 0, nil
}

// Forget drops the permit held for key, cancelling it in every limiter of
// ls if it was not granted yet.
func (g *Gate) Forget(key any, ls map[string]*Limiter) {
	if p, ok := g.held.LoadAndDelete(key); ok {
		for _, l := range ls {
			l.Cancel(p.(*Permit))
		}
	}
}

// ForgetIn drops the permit held for key, cancelling it in l if it was not
// granted yet: for a gate whose permits come from many limiters, each key's
// from one known to the caller.
func (g *Gate) ForgetIn(key any, l *Limiter) {
	if p, ok := g.held.LoadAndDelete(key); ok {
		l.Cancel(p.(*Permit))
	}
}
