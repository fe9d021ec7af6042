// Command e2eapp is the app of the end-to-end suite's app image: a small
// HTTP backend plus the aperio-client that publishes it, in one container
// whose FROM scratch image has no shell. It starts itself again as the
// backend (a child process), waits until the backend listens, then
// replaces itself with aperio-client, which reads its whole configuration
// from the APERIO_* environment (APERIO_TARGET pointing at the backend).
// So the client is the container's main process, as in a real deployment:
// SIGTERM reaches it directly, an instance that retires through
// idle_timeout ends its container, and a SIGKILL of the container kills the
// client first (the kernel then kills the backend), so the server sees the
// instance vanish rather than a backend failing under a live client.
//
// The backend answers:
//
//	GET /           "hello from HOST\n"
//	GET /slow?ms=N  the same, after N milliseconds (before the response head)
//	GET /healthz    "ok\n"
//	GET /headers    the request's headers as a JSON object (canonical name
//	                to values), so that the suite sees what the server
//	                forwarded: X-Aperio-User, X-Aperio-Auth, the cookies
//
// and, on 127.0.0.1:7000, echoes TCP connections back, half-closing once
// its peer has: the target of an expose: entry (tcp-client.yaml).
//
// Usage:
//
//	e2eapp --client /aperio-client [--listen 127.0.0.1:3000] [-- CLIENT ARGS...]
//	e2eapp --backend [--listen 127.0.0.1:3000]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/aperio-dev/aperio/internal/logkey"
)

func main() {
	fs := flag.NewFlagSet("e2eapp", flag.ContinueOnError)
	client := fs.String("client", "/aperio-client", "`path` of the aperio-client binary")
	listen := fs.String("listen", "127.0.0.1:3000", "TCP `address` of the backend")
	backend := fs.Bool("backend", false, "serve the backend only (the child process)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	var err error
	if *backend {
		err = serve(*listen)
	} else {
		err = launch(*client, *listen, fs.Args())
	}
	logger.Error("e2eapp stopped", logkey.Err, err)
	os.Exit(1)
}

// serve runs the backend until SIGTERM or SIGINT.
func serve(listen string) error {
	host, err := os.Hostname()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	echo, err := net.Listen("tcp", echoAddr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	go serveEcho(echo)
	srv := &http.Server{Handler: routes(host), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		echo.Close()
		srv.Close()
	}()
	return srv.Serve(ln)
}

// echoAddr is where the backend echoes TCP.
const echoAddr = "127.0.0.1:7000"

// serveEcho sends back what each connection sends, and half-closes once
// the peer has, until ln is closed. A connection silent for 5 minutes is
// closed.
func serveEcho(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Minute))
			io.Copy(c, c)
			c.(*net.TCPConn).CloseWrite()
		}()
	}
}

// launch starts the backend as a child, waits until it accepts
// connections, and replaces this process with the client. It returns only
// on failure.
func launch(client, listen string, args []string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	backend := exec.Command(self, "--backend", "--listen", listen)
	backend.Stdout, backend.Stderr = os.Stdout, os.Stderr
	if err := backend.Start(); err != nil {
		return fmt.Errorf("start backend: %w", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", listen, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("backend does not listen on %s: %w", listen, err)
		}
		time.Sleep(20 * time.Millisecond) // polling a child's listener; nothing to wait on
	}
	argv := append([]string{client}, args...)
	return fmt.Errorf("exec client: %w", syscall.Exec(client, argv, os.Environ()))
}

func routes(host string) http.Handler {
	mux := http.NewServeMux()
	hello := "hello from " + host + "\n"
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, hello)
	})
	mux.HandleFunc("GET /slow", func(w http.ResponseWriter, r *http.Request) {
		ms, err := strconv.Atoi(r.URL.Query().Get("ms"))
		if err != nil || ms < 0 || ms > 60_000 {
			http.Error(w, "ms must be 0..60000", http.StatusBadRequest)
			return
		}
		t := time.NewTimer(time.Duration(ms) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, hello)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "ok\n")
	})
	// The head is bounded by the server that forwarded it (max_header_bytes).
	mux.HandleFunc("GET /headers", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(r.Header) // fails only writing: the visitor left
	})
	return mux
}
