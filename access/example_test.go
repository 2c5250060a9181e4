package access_test

import (
	"fmt"

	"github.com/jetflow-io/jetflow/access"
	"github.com/jetflow-io/jetflow/streams"
)

// Render the accounts of a deployment: jetflow's account with the deploy
// step's admin (add the workers and operators the same way), and a tenant
// whose producer may enqueue its own types only.
func ExampleConfig() {
	n := streams.MustNames("")
	admin, err := access.Admin(n, access.Options{})
	if err != nil {
		panic(err)
	}
	producer, err := access.Producer(n, access.Options{Types: []string{"tenant_a.>"}})
	if err != nil {
		panic(err)
	}
	conf, err := access.Config(n, "JETFLOW",
		[]access.User{{Name: "admin", Password: "admin-secret", Permissions: admin}},
		access.Tenant{Account: "TENANT_A", Types: []string{"tenant_a.>"},
			Users: []access.User{{Name: "producer", Password: "producer-secret", Permissions: producer}}})
	if err != nil {
		panic(err)
	}
	fmt.Print(conf)
	// Output:
	// accounts {
	//   JETFLOW {
	//     jetstream: enabled
	//     users: [
	//       { user: "admin", password: "admin-secret", permissions: {
	//         publish: { allow: ["$JS.API.>"] }
	//         subscribe: { allow: ["_INBOX_admin.>"] }
	//       } }
	//     ]
	//     exports: [
	//       { service: "jetflow.task.>", accounts: ["TENANT_A"] }
	//       { service: "jetflow.ord.>", accounts: ["TENANT_A"] }
	//       { service: "jetflow.delay.>", accounts: ["TENANT_A"] }
	//     ]
	//   }
	//   TENANT_A {
	//     users: [
	//       { user: "producer", password: "producer-secret", permissions: {
	//         publish: { allow: ["jetflow.task.*.tenant_a.>", "jetflow.ord.tenant_a.>", "jetflow.delay.>"] }
	//         subscribe: { allow: ["_INBOX_producer.>"] }
	//       } }
	//     ]
	//     imports: [
	//       { service: { account: "JETFLOW", subject: "jetflow.task.*.tenant_a.>" } }
	//       { service: { account: "JETFLOW", subject: "jetflow.ord.tenant_a.>" } }
	//       { service: { account: "JETFLOW", subject: "jetflow.delay.>" } }
	//     ]
	//   }
	// }
}

// Render the accounts of a deployment of two task partitions: the jetflow
// account exports, and the tenant imports, the intake subjects of both.
// Its producer's permissions come from access.Producer with the same
// Partitions, and its client runs with framework.WithPartitions(2).
func ExampleAccounts() {
	n := streams.MustNames("")
	conf, err := access.Accounts{Account: "JETFLOW", Partitions: 2,
		Tenants: []access.Tenant{{Account: "TENANT_A", Types: []string{"tenant_a.>"}}}}.Render(n)
	if err != nil {
		panic(err)
	}
	fmt.Print(conf)
	// Output:
	// accounts {
	//   JETFLOW {
	//     jetstream: enabled
	//     users: [
	//     ]
	//     exports: [
	//       { service: "jetflow.task.>", accounts: ["TENANT_A"] }
	//       { service: "jetflow.ord.>", accounts: ["TENANT_A"] }
	//       { service: "jetflow.p1.task.>", accounts: ["TENANT_A"] }
	//       { service: "jetflow.p1.ord.>", accounts: ["TENANT_A"] }
	//       { service: "jetflow.delay.>", accounts: ["TENANT_A"] }
	//     ]
	//   }
	//   TENANT_A {
	//     users: [
	//     ]
	//     imports: [
	//       { service: { account: "JETFLOW", subject: "jetflow.task.*.tenant_a.>" } }
	//       { service: { account: "JETFLOW", subject: "jetflow.ord.tenant_a.>" } }
	//       { service: { account: "JETFLOW", subject: "jetflow.p1.task.*.tenant_a.>" } }
	//       { service: { account: "JETFLOW", subject: "jetflow.p1.ord.tenant_a.>" } }
	//       { service: { account: "JETFLOW", subject: "jetflow.delay.>" } }
	//     ]
	//   }
	// }
}
