package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/aperio-dev/aperio/cmd/aperio-server/serverconfig"
	"github.com/aperio-dev/aperio/internal/exitcode"
)

// healthcheckTimeout bounds the whole self-check, connect to last byte. A
// Docker HEALTHCHECK --timeout longer than this sees our own message
// instead of killing the probe.
const healthcheckTimeout = 3 * time.Second

// readyzURL is where the server cfg describes answers readiness on this
// machine: loopback when it listens on every address ("", 0.0.0.0, ::),
// else the one address it listens on; https when it serves TLS.
func readyzURL(cfg serverconfig.Config) string {
	host := cfg.Host
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	scheme := "http"
	if cfg.TLSCert != "" || cfg.ACME.Enabled() {
		scheme = "https"
	}
	u := url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(cfg.Port)), Path: "/aperio/readyz"}
	return u.String()
}

// selfCheck asks the server cfg describes whether it is ready (GET
// /aperio/readyz) and returns nil on a 200. Anything else prints one line
// naming the URL and the reason on stderr and returns exitcode.ErrFailure.
// It blocks for at most healthcheckTimeout.
func selfCheck(ctx context.Context, cfg serverconfig.Config, stderr io.Writer) error {
	target := readyzURL(cfg)
	if err := getReady(ctx, target); err != nil {
		fmt.Fprintf(stderr, "aperio-server: healthcheck %s: %v\n", target, err)
		return exitcode.ErrFailure
	}
	return nil
}

func getReady(ctx context.Context, target string) error {
	ctx, cancel := context.WithTimeout(ctx, healthcheckTimeout)
	defer cancel()
	tr := &http.Transport{
		// The address is our own: an HTTP(S)_PROXY set for the app's
		// outbound calls must not carry it elsewhere.
		Proxy: nil,
		// Certificates are not verified. The question is "does the
		// process on this port answer", asked over loopback (or the one
		// address the server binds) where nothing sits in between; the
		// certificate names the public hostname, not 127.0.0.1, and may
		// be signed by a CA the image does not carry. Nothing secret is
		// sent and only the status code is read.
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{
		Transport: tr,
		// readyz never redirects: a 3xx means something else answered.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // the URL is already in the message
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("no answer within %v", healthcheckTimeout)
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("answered %s", resp.Status)
	}
	return nil
}
