package framework

import (
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// BackoffPolicy computes the delay before a retry: exponential growth from
// Initial by Multiplier, capped at Max, with each delay drawn uniformly from
// [d·(1−Randomization), d·(1+Randomization)] so that workers retrying together
// spread out. The zero value means the defaults.
type BackoffPolicy struct {
	// Initial is the base delay of the first retry. Default 1 s.
	Initial time.Duration
	// Max caps the base delay. Default 10 minutes.
	Max time.Duration
	// Multiplier is the growth factor per attempt, ≥ 1. Default 2.
	Multiplier float64
	// Randomization is the jitter factor in [0, 1]. Default 0.5. Set a
	// negative value for no jitter.
	Randomization float64
}

func (p BackoffPolicy) withDefaults() BackoffPolicy {
	if p.Initial <= 0 {
		p.Initial = DefaultBackoffInitial
	}
	if p.Max <= 0 {
		p.Max = DefaultBackoffMax
	}
	if p.Max < p.Initial {
		p.Max = p.Initial
	}
	if p.Multiplier == 0 {
		p.Multiplier = DefaultBackoffMultiplier
	}
	switch {
	case p.Randomization == 0:
		p.Randomization = DefaultBackoffRandomization
	case p.Randomization < 0:
		p.Randomization = 0
	}
	return p
}

func (p BackoffPolicy) validate() error {
	if p.Multiplier != 0 && p.Multiplier < 1 {
		return fmt.Errorf("%w: backoff multiplier %v, want ≥ 1", ErrInvalidOption, p.Multiplier)
	}
	if p.Randomization > 1 {
		return fmt.Errorf("%w: backoff randomization %v, want ≤ 1", ErrInvalidOption, p.Randomization)
	}
	return nil
}

// Delay returns the delay before retrying after failed attempt number attempt
// (1 for the first failure). Successive calls give different values when
// Randomization > 0.
func (p BackoffPolicy) Delay(attempt int) time.Duration {
	p = p.withDefaults()
	if attempt < 1 {
		attempt = 1
	}
	b := &backoff.ExponentialBackOff{
		InitialInterval:     p.Initial,
		RandomizationFactor: p.Randomization,
		Multiplier:          p.Multiplier,
		MaxInterval:         p.Max,
		MaxElapsedTime:      0,
		Stop:                backoff.Stop,
		Clock:               backoff.SystemClock,
	}
	b.Reset()
	var d time.Duration
	// Past 64 doublings every base delay is capped at Max.
	for i := 0; i < min(attempt, 64); i++ {
		d = b.NextBackOff()
	}
	return d
}
