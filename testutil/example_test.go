package testutil_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/testutil"
)

// A three-node cluster in-process and an R3 stream on it: one leader and two
// followers. Tests use RunCluster, which also registers the shutdown.
func ExampleStartCluster() {
	dir, err := os.MkdirTemp("", "jetflow-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	c, err := testutil.StartCluster(3, dir)
	if err != nil {
		panic(err)
	}
	defer c.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		panic(err)
	}
	nc, err := c.ConnectURL()
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		panic(err)
	}
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Replicas: 3})
	if err != nil {
		panic(err)
	}
	if _, err := js.Publish(ctx, "orders.new", []byte("42")); err != nil {
		panic(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("replicas:", info.Config.Replicas, "followers:", len(info.Cluster.Replicas), "messages:", info.State.Msgs)
	// Output: replicas: 3 followers: 2 messages: 1
}
