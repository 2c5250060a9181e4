package asyncpub

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// ackCases are replies the server writes, and near misses of them.
var ackCases = []struct {
	data    string
	scanned bool
}{
	{`{"stream":"JETFLOW_TASKS","seq":1}`, true},
	{`{"stream":"S","seq":42,"duplicate":true}`, true},
	{`{"stream":"S","seq":18446744073709551615}`, false}, // 20 digits: left to the decoder
	{`{"stream":"S","seq":1844674407370955161}`, true},
	{`{"stream":"S","seq":42,"domain":"hub"}`, false},
	{`{"stream":"S","domain":"hub","seq":42}`, false},
	{`{"stream":"S","seq":42,"duplicate":false}`, false},
	{`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"},"stream":"S","seq":0}`, false},
	{`{"stream":"S","seq":0}`, false},
	{`{"stream":"S","seq":007}`, false},
	{`{"stream":"","seq":7}`, false},
	{`{"stream":"A\"B","seq":7}`, false},
	{`{"stream":"S","seq":7} `, false},
	{`{"stream":"S","seq":-7}`, false},
	{`{"stream":"S","seq":}`, false},
	{`{"stream":"S","seq":7`, false},
	{`{"seq":7,"stream":"S"}`, false},
	{``, false},
}

// TestParseAckScanMatchesJSON checks that the scanner's answers are the JSON
// decoder's, and that it leaves to the decoder what it does not read itself.
func TestParseAckScanMatchesJSON(t *testing.T) {
	for _, tc := range ackCases {
		_, _, _, ok := scan([]byte(tc.data))
		if ok != tc.scanned {
			t.Errorf("scan(%s) scanned %v, want %v", tc.data, ok, tc.scanned)
		}
		checkAgrees(t, []byte(tc.data))
	}
}

// FuzzParseAck checks on any reply that ParseAck answers what the JSON
// decoder answers.
func FuzzParseAck(f *testing.F) {
	for _, tc := range ackCases {
		f.Add([]byte(tc.data))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkAgrees(t, data) })
}

func checkAgrees(t *testing.T, data []byte) {
	t.Helper()
	got, gerr := ParseAck(&nats.Msg{Data: data}, "S")
	want, werr := decode(data)
	if got != want || (gerr == nil) != (werr == nil) {
		t.Errorf("ParseAck(%q) = %+v, %v; the decoder alone %+v, %v", data, got, gerr, want, werr)
	}
}

// A no-responders status is the stream's absence, not an invalid reply.
func TestParseAckNoResponders(t *testing.T) {
	m := &nats.Msg{Header: nats.Header{"Status": []string{"503"}}}
	if _, err := ParseAck(m, ""); err == nil || err.Error() != "nats: no response from stream" {
		t.Fatalf("503: %v", err)
	}
}
