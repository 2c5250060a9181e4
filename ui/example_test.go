package ui_test

import (
	"log"
	"net/http"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/ui"
)

// Mount the dashboard under /jetflow/ of your own server, behind your own
// authentication.
func ExampleNew() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	h, err := ui.New(nc, ui.Options{ReadOnly: true})
	if err != nil {
		log.Fatal(err)
	}
	requireLogin := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, _, ok := r.BasicAuth(); !ok { // your check here
				w.Header().Set("WWW-Authenticate", `Basic realm="jetflow"`)
				http.Error(w, "login required", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	mux := http.NewServeMux()
	mux.Handle("/jetflow/", http.StripPrefix("/jetflow", requireLogin(h)))
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", mux))
}
