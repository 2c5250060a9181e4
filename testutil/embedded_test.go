package testutil_test

import (
	"os"
	"testing"

	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

func TestStartEmbedded(t *testing.T) {
	t.Parallel()
	emb, err := testutil.StartEmbedded(t.Context(), streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	names := streams.MustNames("")
	for _, name := range []string{names.TaskStream(), names.DLQStream(), names.AdvisoryStream()} {
		if _, err := emb.JetStream.Stream(t.Context(), name); err != nil {
			t.Errorf("stream %s: %v", name, err)
		}
	}
	nc, err := emb.Connect()
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	dir := emb.Server.StoreDir()
	emb.Close()
	if !emb.Conn.IsClosed() {
		t.Error("connection still open after Close")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("store %s still exists after Close (stat: %v)", dir, err)
	}
}
