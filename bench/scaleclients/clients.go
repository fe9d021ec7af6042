package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/aperio-dev/aperio/internal/agent"
	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/logkey"
)

// clientsMain runs -count agents, numbered from -first, each the one a
// real aperio-client builds from its flags (agent.New, then Run with its
// reconnect loop, backoff and heartbeats), all serving one tiny backend
// of this process. It starts them at -rate a second, prints "started N"
// on stdout once all are, and stops them when stdin closes or on SIGTERM.
func clientsMain(args []string) error {
	fset := flag.NewFlagSet("clients", flag.ContinueOnError)
	url := fset.String("url", "", "server URL (http://127.0.0.1:PORT)")
	token := fset.String("token", "", "client token")
	first := fset.Int("first", 0, "number of the first client")
	count := fset.Int("count", 0, "clients to run")
	rate := fset.Float64("rate", 100, "clients started per second")
	perIP := fset.Int("per-ip", 250, "clients per loopback source address")
	if err := fset.Parse(args); err != nil {
		return err
	}
	if *url == "" || *token == "" || *count <= 0 || *rate <= 0 || *perIP <= 0 {
		return errors.New("clients needs -url, -token, -count > 0, -rate > 0 and -per-ip > 0")
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	backend := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") }),
		ReadHeaderTimeout: 5 * time.Second,
	}
	go backend.Serve(ln)
	defer backend.Close()
	target := "http://" + ln.Addr().String()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	var wg sync.WaitGroup
	defer wg.Wait()
	tick := time.NewTicker(time.Duration(float64(time.Second) / *rate))
	defer tick.Stop()
	for i := *first; i < *first+*count; i++ {
		cfg, err := clientConfig(*url, *token, i, target)
		if err != nil {
			return err
		}
		a, err := agent.New(cfg, agent.Options{Logger: log, DialServer: dialFrom(sourceIP(i, *perIP))})
		if err != nil {
			return fmt.Errorf("client %d: %w", i, err)
		}
		wg.Go(func() {
			if err := a.Run(ctx); err != nil {
				log.Error("client ended", logkey.ClientName, fmt.Sprintf("c%d", i), logkey.Err, err)
			}
		})
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
	fmt.Printf("started %d\n", *count)
	<-ctx.Done()
	return nil
}

// clientConfig loads client i's configuration the way aperio-client loads
// its flags (config.LoadClient), with no file, home file or environment:
// name c<i>, hostname c<i>.scale.test, the backend as target, no status
// socket (a real client opens one per process; these share a process).
func clientConfig(url, token string, i int, target string) (config.Client, error) {
	name := fmt.Sprintf("c%d", i)
	cfg, _, err := config.LoadClient(config.ClientOptions{
		File: "aperio.yaml",
		Flags: map[string]string{
			"server.url":    url,
			"server.token":  token,
			"name":          name,
			"hostname":      name + ".scale.test",
			"target":        target,
			"status_socket": config.StatusSocketOff,
			"log_level":     "warn",
		},
		Env:      func(string) (string, bool) { return "", false },
		Hostname: func() (string, error) { return name, nil },
		ReadFile: func(string) ([]byte, error) { return nil, fs.ErrNotExist },
	})
	if err != nil {
		return config.Client{}, fmt.Errorf("client %d config: %w", i, err)
	}
	return cfg, nil
}

// sourceIP is the loopback address client i dials from: perIP clients on
// each of 127.0.0.2, 127.0.0.3, ... (127.0.1.0 after 127.0.0.255).
func sourceIP(i, perIP int) net.IP {
	n := 2 + i/perIP
	return net.IPv4(127, byte(n>>16), byte(n>>8), byte(n))
}

// dialFrom is the dial of tunnel.Client's default (10 s timeout, 30 s
// keepalive) bound to the source address ip.
func dialFrom(ip net.IP) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, LocalAddr: &net.TCPAddr{IP: ip}}
	return d.DialContext
}
