package streams

import (
	"fmt"
	"strings"

	"github.com/jetflow-io/jetflow/internal/streamdefs"
)

// fix says what an operator runs to resolve a difference in field of
// resource that Ensure cannot change in place: exact commands of the nats
// and jetflow CLIs, in order, with what is lost when something is.
func (n Names) fix(resource, field string) string {
	if stream, consumer, ok := strings.Cut(resource, "/"); ok {
		return n.consumerFix(stream, consumer)
	}
	switch {
	case resource == n.TaskStream() && field == "AllowMsgSchedules":
		return "stop producers and workers, then run `" + streamdefs.UpgradeCommand + " --migrate-task-stream` (streams.MigrateTaskStream; docs/upgrading.md)"
	case resource == n.TaskStream() && field == fieldRunDocuments:
		return "stop workflow workers and producers, then run `" + streamdefs.UpgradeCommand + " --migrate-run-documents` (docs/operations.md)"
	case field == "DenyPurge":
		return "the server never allows purges again on a stream that denies them: keep them denied (streams.Config.AllowTaskPurge false, the default) or recreate the stream: " +
			n.recreate(resource)
	}
	return n.recreate(resource)
}

// recreate says how to recreate stream with what it holds kept, or lost
// where it cannot be kept.
func (n Names) recreate(stream string) string {
	rm := fmt.Sprintf("`nats stream rm %s`, then `%s`", stream, streamdefs.UpgradeCommand)
	switch stream {
	case n.TaskStream():
		return fmt.Sprintf("take the %s source off it (`nats stream edit %s`: remove the source; fired tasks wait in %s), stop the producers, "+
			"let the workers empty it (`nats stream info %s` shows 0 messages), %s (decision 040)",
			n.ScheduleStream(), stream, n.ScheduleStream(), stream, rm)
	case n.DelayStream():
		return fmt.Sprintf("stop the producers of delayed tasks, let the workers' movers empty it (`nats stream info %s` shows 0 messages), %s",
			stream, rm)
	case n.ScheduleStream():
		return fmt.Sprintf("it holds the pending delayed tasks and the cron schedules: stop producers and workers, wait until `jetflow tasks ls --state scheduled` lists none, "+
			"take it off the task stream's sources (`nats stream edit %s`), %s, and register the cron schedules again (schedule.Register)",
			n.TaskStream(), rm)
	}
	return fmt.Sprintf("`nats stream backup %s DIR` if its messages matter (they are not restored), %s", stream, rm)
}

// consumerFix says how to recreate a consumer [Ensure] owns.
func (n Names) consumerFix(stream, consumer string) string {
	rm := fmt.Sprintf("`nats consumer rm %s %s`, then `%s`", stream, consumer, streamdefs.UpgradeCommand)
	if stream == n.ScheduleStream() && consumer == n.FiredConsumer() {
		return fmt.Sprintf("take the %s source off %s (`nats stream edit %s`: remove the source; fired tasks wait in %s), %s (it sources them again)",
			stream, n.TaskStream(), n.TaskStream(), stream, rm)
	}
	return rm + " (waiting messages stay in the stream and go to the new consumer)"
}

// bucketFix says how to recreate a KV bucket whose storage differs.
func bucketFix(bucket string) string {
	return fmt.Sprintf("the server cannot change a bucket's storage: copy out the keys you need (`nats kv ls %s`), `nats kv del %s`, then `%s` (it creates the bucket again, empty)",
		bucket, bucket, streamdefs.UpgradeCommand)
}
