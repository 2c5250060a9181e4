package handlers

import (
	"context"
	"log/slog"
	"time"

	"github.com/jetflow-io/jetflow/framework"
)

// LogKeyDuration is the attribute key of an attempt's duration in the records
// of [Logging].
const LogKeyDuration = "duration"

// Logging returns middleware that logs every attempt of a task:
//
//   - "task started" at debug level when the handler is called;
//   - "task done" at info level, with its duration, when it returns nil;
//   - "task failed; will be retried" at warn level, with the duration and the
//     error, when it fails and attempts remain;
//   - "task failed for good" at error level when it fails permanently
//     ([framework.IsPermanent]) or on its last attempt;
//   - "task handler panicked" at error level, when the handler panics (the
//     worker recovers the panic and logs the stack itself).
//
// Records carry the task's ID, type, priority and attempt under the
// [framework.LogKeyTaskID], [framework.LogKeyTaskType],
// [framework.LogKeyPriority] and [framework.LogKeyAttempt] keys, the error
// under [framework.LogKeyError] and the duration under [LogKeyDuration].
// Payloads and headers are never logged.
//
// With a nil logger the task's own logger is used ([framework.Task.Logger],
// derived from the worker's [framework.WithLogger]), which already carries
// the task attributes. Otherwise records go to logger.
//
// Install it outermost (first in [framework.WithMiddleware]) so that it sees
// the error the worker will act on.
func Logging(logger *slog.Logger) framework.Middleware {
	return func(next framework.Handler) framework.Handler {
		return framework.HandlerFunc(func(ctx context.Context, t *framework.Task) error {
			log := taskLogger(logger, t)
			log.LogAttrs(ctx, slog.LevelDebug, "task started")
			start := time.Now()
			returned := false
			defer func() {
				if !returned {
					log.LogAttrs(ctx, slog.LevelError, "task handler panicked",
						slog.Duration(LogKeyDuration, time.Since(start)))
				}
			}()
			err := next.Handle(ctx, t)
			returned = true
			took := slog.Duration(LogKeyDuration, time.Since(start))
			switch {
			case err == nil:
				log.LogAttrs(ctx, slog.LevelInfo, "task done", took)
			case framework.IsPermanent(err) || t.Attempt >= t.MaxAttempts:
				log.LogAttrs(ctx, slog.LevelError, "task failed for good", took,
					slog.Any(framework.LogKeyError, err), slog.Bool("permanent", framework.IsPermanent(err)))
			default:
				log.LogAttrs(ctx, slog.LevelWarn, "task failed; will be retried", took,
					slog.Any(framework.LogKeyError, err))
			}
			return err
		})
	}
}

func taskLogger(logger *slog.Logger, t *framework.Task) *slog.Logger {
	if logger == nil {
		return t.Logger()
	}
	return logger.With(
		slog.String(framework.LogKeyTaskID, t.ID),
		slog.String(framework.LogKeyTaskType, t.Type),
		slog.String(framework.LogKeyPriority, t.Priority.String()),
		slog.Int(framework.LogKeyAttempt, t.Attempt),
	)
}
