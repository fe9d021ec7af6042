// Command oidcprovider is the OpenID Connect provider of the end-to-end
// suite, test-only: mockoidc (github.com/oauth2-proxy/mockoidc) at a fixed
// issuer, with the client id and secret from the environment, plus a
// bearer-protected admin endpoint with which the suite queues the user
// the next login returns. No product binary may link it
// (TestProductBinariesDoNotLinkProvider).
//
//	/oidc/...            mockoidc: discovery, authorize, token, userinfo,
//	                     keys (the issuer is OIDC_ISSUER)
//	POST /admin/users    queue the user of the next login (JSON
//	                     {"subject", "email", "email_verified", "groups"});
//	                     204, 401 without the admin secret, 400 for a bad
//	                     body, 413 beyond 4 KiB, 429 when 16 are queued
//
// An authorization with no user queued logs in mockoidc's default user,
// Jane (jane.doe@example.com, verified).
//
// Usage:
//
//	OIDC_ISSUER=http://oidc:9400/oidc OIDC_CLIENT_ID=... OIDC_CLIENT_SECRET=... \
//	OIDC_ADMIN_SECRET=... oidcprovider [--listen :9400]
//	oidcprovider --healthcheck [--listen :9400]
//
// OIDC_ISSUER is the URL the servers reach it at, inside the compose
// network: http://HOST:PORT/oidc. --healthcheck (the image's HEALTHCHECK)
// fetches the discovery document on loopback and exits 0 on a 200 within
// 3 s.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/oauth2-proxy/mockoidc"

	"github.com/aperio-dev/aperio/internal/logkey"
)

func main() {
	fs := flag.NewFlagSet("oidcprovider", flag.ContinueOnError)
	listen := fs.String("listen", ":9400", "TCP `address` to serve on")
	health := fs.Bool("healthcheck", false, "check the provider listening on --listen, then exit")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if *health {
		if err := healthcheck(*listen); err != nil {
			fmt.Fprintf(os.Stderr, "oidcprovider: %v\n", err)
			os.Exit(1)
		}
		return
	}
	cfg := config{
		Issuer:       os.Getenv("OIDC_ISSUER"),
		ClientID:     os.Getenv("OIDC_CLIENT_ID"),
		ClientSecret: os.Getenv("OIDC_CLIENT_SECRET"),
		AdminSecret:  os.Getenv("OIDC_ADMIN_SECRET"),
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *listen, cfg, logger); err != nil {
		logger.Error("oidc provider stopped", logkey.Err, err)
		stop()
		os.Exit(1)
	}
}

// run serves until ctx is done, then shuts down.
func run(ctx context.Context, listen string, cfg config, logger *slog.Logger) error {
	p, err := newProvider(cfg, logger)
	if err != nil {
		return err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	errc := make(chan error, 1)
	go func() { errc <- p.srv.Serve(ln) }()
	logger.Info("oidc provider listening", logkey.Addr, ln.Addr().String(), logkey.Issuer, p.m.Issuer())
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err = p.srv.Shutdown(shutdownCtx)
	if serveErr := <-errc; !errors.Is(serveErr, http.ErrServerClosed) {
		err = errors.Join(err, serveErr)
	}
	return err
}

// healthcheck GETs the discovery document of the provider listening on
// listen, over loopback when listen names every address.
func healthcheck(listen string) error {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", listen, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	url := "http://" + net.JoinHostPort(host, port) + mockoidc.DiscoveryEndpoint
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s answered %s", url, resp.Status)
	}
	return nil
}
