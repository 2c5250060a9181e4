package access

import (
	"fmt"
	"strings"

	"github.com/jetflow-io/jetflow/streams"
)

// User is a NATS user of the configuration [Config] renders.
type User struct {
	// Name and Password are the user's credentials. Both are rendered in
	// double quotes: they may not contain '"', '\\', '$' or control
	// characters.
	Name, Password string
	// Permissions are the user's allow lists.
	Permissions Permissions
}

// Tenant is an account of producers. It has no JetStream: it imports the
// intake subjects of its task types from the jetflow account as services,
// so the server's answers to its publishes return into this account.
type Tenant struct {
	// Account is the account's name, for example "TENANT_A".
	Account string
	// Types are the task types (or patterns of them, "tenant_a.>") its
	// producers may enqueue, as in [Options].Types; empty means every type.
	Types []string
	// Users are its producers, usually with [Producer]'s permissions for
	// the same Types.
	Users []User
}

// Config renders the "accounts" block of a nats-server configuration for
// the documented deployment of one task partition: [Accounts] with Account
// account, Users users and Tenants tenants. Use [Accounts] for a deployment
// of more partitions.
func Config(n streams.Names, account string, users []User, tenants ...Tenant) (string, error) {
	return Accounts{Account: account, Users: users, Tenants: tenants}.Render(n)
}

// Accounts is the accounts layout of the documented deployment
// (docs/security.md), which [Accounts.Render] renders: an account holding
// JetStream and jetflow's streams, with the admin, workers and operators,
// exporting the intake subjects ([PartitionedIntake]) as services to the
// tenants; and one account per tenant of producers importing the intake
// subjects of its types. With no tenant it is the single-account layout,
// which does not stop reply-subject injection (docs/security.md).
type Accounts struct {
	// Account is the name of the account holding JetStream, for example
	// "JETFLOW". Required.
	Account string
	// Partitions is the deployment's task partition count
	// (streams.Config.Partitions): the account exports, and the tenants
	// import, the intake subjects of partitions 0 to Partitions-1. Give
	// the users the same count in their [Options]. 0 or 1: one partition.
	Partitions int
	// Users are the users of Account (admin, workers, operators).
	Users []User
	// Tenants are the accounts of producers. Default none.
	Tenants []Tenant
}

// Render renders the "accounts" block of a for the topology names n. Add
// the rest of the configuration around it (listen, tls, jetstream's
// store_dir). Names and passwords are checked, not escaped: an invalid one,
// or a partition count out of range, returns an error wrapping
// [ErrInvalid].
func (a Accounts) Render(n streams.Names) (string, error) {
	var b strings.Builder
	w := func(indent int, format string, args ...any) {
		b.WriteString(strings.Repeat("  ", indent))
		fmt.Fprintf(&b, format, args...)
		b.WriteByte('\n')
	}
	account := a.Account
	if err := checkLiteral(account); err != nil || strings.Contains(account, ".") {
		return "", fmt.Errorf("%w account name %q", ErrInvalid, account)
	}
	intake, err := PartitionedIntake(n, a.Partitions, nil)
	if err != nil {
		return "", err
	}
	w(0, "accounts {")
	w(1, "%s {", account)
	w(2, "jetstream: enabled")
	if err := writeUsers(w, a.Users); err != nil {
		return "", err
	}
	if len(a.Tenants) > 0 {
		var names []string
		for _, t := range a.Tenants {
			if err := checkLiteral(t.Account); err != nil || strings.Contains(t.Account, ".") || t.Account == account {
				return "", fmt.Errorf("%w tenant account name %q", ErrInvalid, t.Account)
			}
			names = append(names, quote(t.Account))
		}
		w(2, "exports: [")
		for _, s := range intake {
			w(3, "{ service: %s, accounts: [%s] }", quote(s), strings.Join(names, ", "))
		}
		w(2, "]")
	}
	w(1, "}")
	for _, t := range a.Tenants {
		subjects, err := PartitionedIntake(n, a.Partitions, t.Types)
		if err != nil {
			return "", err
		}
		w(1, "%s {", t.Account)
		if err := writeUsers(w, t.Users); err != nil {
			return "", err
		}
		w(2, "imports: [")
		for _, s := range subjects {
			w(3, "{ service: { account: %s, subject: %s } }", quote(account), quote(s))
		}
		w(2, "]")
		w(1, "}")
	}
	w(0, "}")
	return b.String(), nil
}

func writeUsers(w func(int, string, ...any), users []User) error {
	w(2, "users: [")
	for _, u := range users {
		if err := checkQuotable(u.Name); err != nil || u.Name == "" {
			return fmt.Errorf("%w user name %q", ErrInvalid, u.Name)
		}
		if err := checkQuotable(u.Password); err != nil || u.Password == "" {
			return fmt.Errorf("%w password of user %q", ErrInvalid, u.Name)
		}
		w(3, "{ user: %s, password: %s, permissions: {", quote(u.Name), quote(u.Password))
		w(4, "publish: { allow: %s }", list(u.Permissions.Publish))
		w(4, "subscribe: { allow: %s }", list(u.Permissions.Subscribe))
		w(3, "} }")
	}
	w(2, "]")
	return nil
}

// checkQuotable accepts what renders in double quotes as itself: printable
// ASCII without '"', '\\' and '$' (which the configuration parser would
// read as a variable).
func checkQuotable(s string) error {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '$' {
			return fmt.Errorf("byte %d", i)
		}
	}
	return nil
}

// quote renders s in double quotes. Subjects come from streams.Names and
// the checks above, so they need no escaping.
func quote(s string) string { return `"` + s + `"` }

func list(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = quote(v)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
