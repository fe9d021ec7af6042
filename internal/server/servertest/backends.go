package servertest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/gorilla/websocket"
)

// Inspection is what InspectHandler saw of a request, and the JSON body it
// answers with.
type Inspection struct {
	Method         string `json:"method"`
	Host           string `json:"host"`
	RequestURI     string `json:"request_uri"`
	ForwardedFor   string `json:"x_forwarded_for"`
	ForwardedProto string `json:"x_forwarded_proto"`
	ForwardedHost  string `json:"x_forwarded_host"`
	Body           string `json:"body"`
}

// InspectHandler is a backend that answers every request with an
// Inspection of it (the whole body read) and the header X-Backend:
// inspect, so a test sees what reached the app through the tunnel.
func InspectHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Backend", "inspect")
		json.NewEncoder(w).Encode(Inspection{
			Method:         r.Method,
			Host:           r.Host,
			RequestURI:     r.RequestURI,
			ForwardedFor:   r.Header.Get("X-Forwarded-For"),
			ForwardedProto: r.Header.Get("X-Forwarded-Proto"),
			ForwardedHost:  r.Header.Get("X-Forwarded-Host"),
			Body:           string(b),
		})
	})
}

// IdentityEcho is a backend that answers with what it was told about the
// visitor: the identity headers (X-Aperio-Identity in the response's
// X-Identity; X-Aperio-User and X-Aperio-Auth in the body) and the
// Authorization header, if it reached the app.
func IdentityEcho() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Identity", r.Header.Get("X-Aperio-Identity"))
		fmt.Fprintf(w, "user=%s auth=%s authorization=%q", r.Header.Get("X-Aperio-User"), r.Header.Get("X-Aperio-Auth"), r.Header.Get("Authorization"))
	})
}

// HeaderEcho is a backend that answers with the request headers it
// received as JSON and the header X-Backend: echo, so a test sees exactly
// what reached the app (see EdgeVisit).
func HeaderEcho() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Backend", "echo")
		json.NewEncoder(w).Encode(r.Header)
	})
}

// wsUpgrader accepts any origin: the tests' backends sit behind the
// tunnel, where the visitor's Origin is not theirs to judge.
var wsUpgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

// WSEcho is a backend that answers a WebSocket by echoing every message
// with prefix, and sends the error that ended the connection to done
// (nil: none is sent). done must have room for the error, or a reader.
func WSEcho(prefix string, done chan<- error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, err := wsUpgrader.Upgrade(w, r, nil)
		if err != nil {
			if done != nil {
				done <- err
			}
			return
		}
		defer c.Close()
		for {
			typ, msg, err := c.ReadMessage()
			if err == nil {
				err = c.WriteMessage(typ, append([]byte(prefix), msg...))
			}
			if err != nil {
				if done != nil {
					done <- err
				}
				return
			}
		}
	}
}
