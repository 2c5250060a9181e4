// The users of the example, in the accounts layout of docs/security.md,
// rendered by package access.

package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/jetflow-io/jetflow/access"
	"github.com/jetflow-io/jetflow/streams"
)

// Accounts of the example: jetflow's, with JetStream, and one tenant of
// producers.
const (
	accountJetflow = "JETFLOW"
	accountTenant  = "TENANT_A"
)

// user is one NATS user: its password is random, and it gets its own inbox
// prefix so that no other user can subscribe to its replies.
type user struct {
	name, password, inbox string
}

// newUsers returns the users of the example (one per role, the worker
// serving workerTypes) and the "accounts" block of the server's
// configuration that holds them.
func newUsers(n streams.Names, workerTypes ...string) (map[string]user, string, error) {
	users := make(map[string]user)
	rendered := make(map[string]access.User)
	roles := []struct {
		name  string
		perms func(streams.Names, access.Options) (access.Permissions, error)
	}{
		{access.RoleAdmin, access.Admin},
		{access.RoleWorker, access.Worker},
		{access.RoleOperator, access.Operator},
		{access.RoleProducer, access.Producer},
	}
	for _, r := range roles {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return nil, "", err
		}
		o := access.Options{InboxPrefix: "_INBOX_" + r.name}
		if r.name == access.RoleWorker {
			o.Types = workerTypes
		}
		p, err := r.perms(n, o)
		if err != nil {
			return nil, "", err
		}
		u := user{name: r.name, password: hex.EncodeToString(b), inbox: o.InboxPrefix}
		users[r.name] = u
		rendered[r.name] = access.User{Name: u.name, Password: u.password, Permissions: p}
	}
	conf, err := access.Config(n, accountJetflow,
		[]access.User{rendered[access.RoleAdmin], rendered[access.RoleWorker], rendered[access.RoleOperator]},
		access.Tenant{Account: accountTenant, Users: []access.User{rendered[access.RoleProducer]}})
	if err != nil {
		return nil, "", err
	}
	return users, conf, nil
}

// serverOptions writes the server's configuration (loopback on a random
// port, JetStream stored under dir, the accounts) into dir and reads it
// back as nats-server would.
func serverOptions(dir, accounts string) (*server.Options, error) {
	conf := fmt.Sprintf("listen: \"127.0.0.1:-1\"\njetstream { store_dir: %q }\n%s", filepath.Join(dir, "jetstream"), accounts)
	file := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	o, err := server.ProcessConfigFile(file)
	if err != nil {
		return nil, fmt.Errorf("server configuration: %w", err)
	}
	return o, nil
}
