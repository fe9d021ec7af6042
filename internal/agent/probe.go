package agent

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aperio-dev/aperio/internal/config"
)

// prober performs the health checks of one service: a GET of its
// endpoint, or the gRPC health check of an h2c target.
type prober struct {
	client  *http.Client
	url     string
	grpc    bool
	success int // the highest status class that passes: 2 or 3
}

func newProber(svc *service) *prober {
	h := svc.cfg.Health
	u := svc.dialURL()
	if h.Type == config.HealthGRPC {
		u.Path = grpcHealthPath
	} else {
		u.Path = strings.TrimSuffix(u.Path, "/") + h.Endpoint
	}
	p := &prober{
		client: &http.Client{
			Transport: svc.transport,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
		url:     u.String(),
		grpc:    h.Type == config.HealthGRPC,
		success: 2,
	}
	if h.Success == config.Success2xx3xx {
		p.success = 3
	}
	return p
}

// dialURL is the service's target as its transport is asked for it: h2c
// as http, a unix socket as http to the placeholder host, with the path
// (none for a socket) but no RawPath.
func (svc *service) dialURL() url.URL {
	u := *svc.target
	switch u.Scheme {
	case "h2c":
		u.Scheme = "http"
	case config.TargetUnix:
		u.Scheme, u.Host, u.Path = "http", unixHost, ""
	}
	u.RawPath = ""
	return u
}

// probe performs one health check within timeout. An http probe passes on
// a 2xx (or, with health.success 2xx-3xx, a 3xx too), a grpc probe on
// SERVING. The detail says why a probe failed.
func (p *prober) probe(ctx context.Context, timeout time.Duration) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if p.grpc {
		if err := p.grpcCheck(ctx); err != nil {
			return false, err.Error()
		}
		return true, ""
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url, nil)
	if err != nil {
		return false, err.Error()
	}
	req.Header.Set("User-Agent", probeAgent)
	resp, err := p.client.Do(req)
	if err != nil {
		return false, err.Error()
	}
	resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < (p.success+1)*100 {
		return true, ""
	}
	return false, resp.Status
}

// probeAgent is the User-Agent of health probes.
const probeAgent = "aperio-client health probe"

// The gRPC health check (grpc.health.v1), framed by hand so that the
// client links no gRPC library: one unary call over HTTP/2, a 5-byte
// message prefix (compressed flag, big-endian length) and a protobuf body.
const (
	grpcHealthPath = "/grpc.health.v1.Health/Check"
	// grpcServing is HealthCheckResponse.ServingStatus SERVING.
	grpcServing = 1
	// maxGRPCHealthAnswer bounds the answer read: a HealthCheckResponse is
	// two bytes.
	maxGRPCHealthAnswer = 4 << 10
)

// errNotServing is a health check answered with a status other than
// SERVING.
var errNotServing = errors.New("grpc health: not serving")

// grpcCheck calls Check for the server as a whole (an empty service
// name: an empty HealthCheckRequest) and reports why it did not answer
// SERVING.
func (p *prober) grpcCheck(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(make([]byte, 5)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	req.Header.Set("User-Agent", probeAgent)
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("grpc health: %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxGRPCHealthAnswer))
	if err != nil {
		return fmt.Errorf("grpc health: %w", err)
	}
	// grpc-status comes in the trailers, or in the headers of a
	// trailers-only answer.
	st := resp.Trailer.Get("Grpc-Status")
	if st == "" {
		st = resp.Header.Get("Grpc-Status")
	}
	if st != "0" {
		return fmt.Errorf("grpc health: grpc-status %q %s", st, resp.Trailer.Get("Grpc-Message"))
	}
	status, err := healthStatus(body)
	if err != nil {
		return err
	}
	if status != grpcServing {
		return fmt.Errorf("%w (status %d)", errNotServing, status)
	}
	return nil
}

// healthStatus decodes the one length-prefixed HealthCheckResponse in
// body and returns its status field (field 1, a varint; 0 when absent).
func healthStatus(body []byte) (uint64, error) {
	if len(body) < 5 || body[0] != 0 {
		return 0, errors.New("grpc health: malformed or compressed answer")
	}
	n := binary.BigEndian.Uint32(body[1:5])
	msg := body[5:]
	if uint64(n) != uint64(len(msg)) {
		return 0, errors.New("grpc health: answer length does not match its prefix")
	}
	var status uint64
	for len(msg) > 0 {
		tag, k := binary.Uvarint(msg)
		if k <= 0 {
			return 0, errors.New("grpc health: malformed field")
		}
		msg = msg[k:]
		switch tag & 7 {
		case 0: // varint
			v, k := binary.Uvarint(msg)
			if k <= 0 {
				return 0, errors.New("grpc health: malformed varint")
			}
			msg = msg[k:]
			if tag>>3 == 1 {
				status = v
			}
		case 2: // length-delimited: skipped
			l, k := binary.Uvarint(msg)
			if k <= 0 || l > uint64(len(msg)-k) {
				return 0, errors.New("grpc health: malformed field")
			}
			msg = msg[k+int(l):]
		default:
			return 0, errors.New("grpc health: unexpected field type")
		}
	}
	return status, nil
}
