package main

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/nats-io/nats.go"
)

// errNoDashboard reports a build without the dashboard package.
var errNoDashboard = errors.New("the web dashboard is not part of this build yet; use 'jetflow status --watch' meanwhile (with 'dev', pass --no-ui)")

// dashboardHandler returns the dashboard for the topology under prefix.
func dashboardHandler(nc *nats.Conn, prefix string, readOnly bool, logger *slog.Logger) (http.Handler, error) {
	return nil, errNoDashboard
}
