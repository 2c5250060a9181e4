package inspect_test

import (
	"os"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/goleak"

	"github.com/jetflow-io/jetflow/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// exampleServer starts an embedded server with JetStream and returns it and
// a cleanup function. Examples have no *testing.T, so they use
// testutil.StartServer with a directory of their own.
func exampleServer() (srv *server.Server, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "jetflow-example-")
	if err != nil {
		return nil, nil, err
	}
	srv, err = testutil.StartServer(&server.Options{JetStream: true, StoreDir: dir, DontListen: true, NoLog: true, NoSigs: true})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return srv, func() { testutil.ShutdownServer(srv); os.RemoveAll(dir) }, nil
}
