package workflow

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// TestParseAckScanMatchesJSON checks that the scanner's answers are the JSON
// decoder's, and that it leaves to the decoder what it does not read itself.
func TestParseAckScanMatchesJSON(t *testing.T) {
	for _, tc := range []struct {
		data    string
		scanned bool
	}{
		{`{"stream":"JETFLOW_RUNS","seq":1}`, true},
		{`{"stream":"S","seq":18446744073709551615}`, false}, // 20 digits: left to the decoder
		{`{"stream":"S","seq":1844674407370955161}`, true},
		{`{"stream":"JETFLOW_RUNS","seq":42,"domain":"hub"}`, false},
		{`{"stream":"JETFLOW_RUNS","seq":42,"duplicate":true}`, false},
		{`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"},"stream":"JETFLOW_RUNS","seq":0}`, false},
		{`{"stream":"JETFLOW_RUNS","seq":0}`, false},
		{`{"stream":"JETFLOW_RUNS","seq":007}`, false},
		{`{"stream":"","seq":7}`, false},
		{`{"stream":"A\"B","seq":7}`, false},
		{`{"stream":"JETFLOW_RUNS","seq":7} `, false},
		{`{"stream":"JETFLOW_RUNS","seq":-7}`, false},
		{`{"stream":"JETFLOW_RUNS","seq":}`, false},
		{`{"stream":"JETFLOW_RUNS","seq":7`, false},
		{`{"seq":7,"stream":"JETFLOW_RUNS"}`, false},
		{``, false},
	} {
		seq, ok := scanAck([]byte(tc.data))
		if ok != tc.scanned {
			t.Errorf("scanAck(%s) scanned %v, want %v", tc.data, ok, tc.scanned)
		}
		jseq, jerr := parseAckJSON(tc.data)
		if ok && (jerr != nil || jseq != seq) {
			t.Errorf("scanAck(%s) = %d, the decoder says %d, %v", tc.data, seq, jseq, jerr)
		}
		pseq, perr := parseAck(&nats.Msg{Data: []byte(tc.data)})
		if pseq != jseq || (perr == nil) != (jerr == nil) {
			t.Errorf("parseAck(%s) = %d, %v; the decoder alone %d, %v", tc.data, pseq, perr, jseq, jerr)
		}
	}
}

// parseAckJSON is parseAck without the scanner.
func parseAckJSON(data string) (uint64, error) {
	return decodeAck(&nats.Msg{Data: []byte(data)})
}
