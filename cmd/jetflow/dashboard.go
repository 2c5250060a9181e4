package main

import (
	"log/slog"
	"net/http"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/ui"
)

// dashboardHandler returns the web dashboard (package ui) for the topology
// under prefix, serving its pages, its JSON API and /metrics.
func dashboardHandler(nc *nats.Conn, prefix string, readOnly bool, logger *slog.Logger) (http.Handler, error) {
	return ui.New(nc, ui.Options{Prefix: prefix, ReadOnly: readOnly, Logger: logger})
}
