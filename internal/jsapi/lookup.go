package jsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
)

// ErrLookupRefused reports that this connection cannot ask whether a stream
// exists: the server refused its "$JS.API.STREAM.INFO.<stream>" request
// (a permissions violation), its account has no JetStream (a producer in
// an account of its own that imports only the publish subjects), or nobody
// answers the JetStream API.
var ErrLookupRefused = errors.New("jetflow: stream lookup refused")

// JetStream API error codes StreamExists tells apart.
const (
	codeStreamNotFound     = 10059
	codeJetStreamNotForAcc = 10039
)

// StreamExists asks the JetStream API whether stream exists, with one
// request that is told apart from a refusal at once: right after the
// request it flushes the connection, and a permissions violation the
// server reported for it by then (the server answers the flush after the
// violation) is returned as [ErrLookupRefused] without waiting for an
// answer that will never come. So are "JetStream not enabled for account"
// and no responders. Any other failure (ctx ended before an answer, an
// API error) is returned as it is. ctx must have a deadline.
func StreamExists(ctx context.Context, nc *nats.Conn, stream string) (bool, error) {
	subject := "$JS.API.STREAM.INFO." + stream
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return false, fmt.Errorf("jetflow: look up stream %s: %w", stream, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	before := nc.LastError()
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		return false, fmt.Errorf("jetflow: look up stream %s: %w", stream, err)
	}
	if err := nc.FlushWithContext(ctx); err != nil {
		return false, fmt.Errorf("jetflow: look up stream %s: %w", stream, err)
	}
	if after := nc.LastError(); refusedPublish(after, subject) && !(refusedPublish(before, subject) && after == before) {
		return false, fmt.Errorf("%w: %s: %w", ErrLookupRefused, stream, after)
	}
	m, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		return false, fmt.Errorf("jetflow: look up stream %s: %w", stream, err)
	}
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		return false, fmt.Errorf("%w: %s: %w", ErrLookupRefused, stream, nats.ErrNoResponders)
	}
	var resp struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return false, fmt.Errorf("jetflow: look up stream %s: bad answer: %w", stream, err)
	}
	switch {
	case resp.Error == nil:
		return true, nil
	case resp.Error.ErrCode == codeStreamNotFound:
		return false, nil
	case resp.Error.ErrCode == codeJetStreamNotForAcc:
		return false, fmt.Errorf("%w: %s: %s", ErrLookupRefused, stream, resp.Error.Description)
	}
	return false, fmt.Errorf("jetflow: look up stream %s: API error %d (%d): %s", stream, resp.Error.Code, resp.Error.ErrCode, resp.Error.Description)
}

// refusedPublish reports whether err is the server's permissions violation
// for a publish to subject. Two such errors are distinct values (nats.go
// makes a new one for each violation), so comparing them tells a new
// refusal from an old one.
func refusedPublish(err error, subject string) bool {
	return err != nil && errors.Is(err, nats.ErrPermissionViolation) &&
		strings.Contains(err.Error(), `Publish to "`+subject+`"`)
}
