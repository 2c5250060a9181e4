package streams_test

import (
	"fmt"

	"github.com/jetflow-io/jetflow/streams"
)

func ExampleNames() {
	n := streams.MustNames("") // the default prefix, "jetflow"
	fmt.Println(n.TaskStream())
	fmt.Println(n.TaskSubject(streams.PriorityCritical, "payments.charge"))
	fmt.Println(n.ScheduleSubject("order-42"))
	fmt.Println(n.DLQSubject("payments.charge"))
	fmt.Println(n.ConsumerName("payments.charge", streams.PriorityCritical))
	// Output:
	// JETFLOW_TASKS
	// jetflow.task.critical.payments.charge
	// jetflow.sched.order-42
	// jetflow.dlq.payments.charge
	// payments_charge-critical
}

func ExampleNames_ParseTaskSubject() {
	n := streams.MustNames("billing")
	p, taskType, err := n.ParseTaskSubject("billing.task.high.invoices.send")
	fmt.Println(p, taskType, err)
	_, _, err = n.ParseTaskSubject("billing.task.urgent.invoices.send")
	fmt.Println(err)
	// Output:
	// high invoices.send <nil>
	// streams: subject not in the jetflow scheme: "billing.task.urgent.invoices.send": streams: invalid priority: "urgent" (want critical, high, normal or low)
}
