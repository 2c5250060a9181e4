package pull

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// parseDelivery must read what nats.go's Metadata reads.
func TestParseDeliveryMatchesNATS(t *testing.T) {
	for _, subj := range []string{
		"$JS.ACK.JETFLOW_TASKS.c1.3.1042.77.1764547200123456789.12",
		"$JS.ACK.hub.ACCHASH.JETFLOW_TASKS.c1.1.9.9.1764547200000000001.0.rand",
		"$JS.ACK._.ACCHASH.S.C.2.5.4.17.0",
		"$JS.ACK.S.C.x.5.4.17.0", // a token that is not a number reads 0
	} {
		got, err := parseDelivery(subj)
		if err != nil {
			t.Fatalf("%s: %v", subj, err)
		}
		md, err := (&nats.Msg{Reply: subj, Sub: &nats.Subscription{}}).Metadata()
		if err != nil {
			t.Fatalf("%s: nats.go: %v", subj, err)
		}
		want := Delivery{NumDelivered: md.NumDelivered, StreamSeq: md.Sequence.Stream, Timestamp: md.Timestamp}
		if got != want {
			t.Errorf("%s: got %+v, want %+v", subj, got, want)
		}
	}
	for _, subj := range []string{"", "$JS.ACK.S.C.1.2.3", "$JS.NAK.S.C.1.2.3.4.5", "x.ACK.S.C.1.2.3.4.5"} {
		if _, err := parseDelivery(subj); err == nil {
			t.Errorf("%q: no error", subj)
		}
	}
	if _, err := parseDelivery("$JS.ACK.S.C.1.2.3.4.5"); err != nil {
		t.Errorf("nine tokens: %v", err)
	}
}
