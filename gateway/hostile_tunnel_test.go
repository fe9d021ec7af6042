package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestHostileTunnelGateway holds the hostile-input cases of the tunnel
// that need the whole server: raw HTTP/2 requests no Go client would
// send, and a visitor that leaves mid-body.
func TestHostileTunnelGateway(t *testing.T) {
	arrived := make(chan struct{}, 1)
	inspect := inspectHandler()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/upload" {
			inspect.ServeHTTP(w, r)
			return
		}
		arrived <- struct{}{}
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
		}
	})
	st := startStack(t, h, nil)
	tests := []struct {
		name       string
		fields     [][2]string // request header fields, pseudo-headers first
		wantStatus int
		wantHost   string // the Host the backend saw, when 200
		wantURI    string
	}{
		{
			name:       "item5/h2-absolute-path-other-host",
			fields:     [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", appHost}, {":path", "http://internal.test/secret?q=1"}},
			wantStatus: http.StatusOK, wantHost: appHost, wantURI: "/secret?q=1",
		},
		{
			name:       "item5/h2-host-equal-to-authority",
			fields:     [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", appHost}, {":path", "/h2"}, {"host", appHost}},
			wantStatus: http.StatusOK, wantHost: appHost, wantURI: "/h2",
		},
		{
			name:       "item5/h2-host-differs-from-authority",
			fields:     [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", appHost}, {":path", "/h2"}, {"host", "internal.test"}},
			wantStatus: http.StatusBadRequest,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body := rawH2Request(t, st.server.addr, tc.fields)
			if status != tc.wantStatus {
				t.Fatalf("h2 request %v = %d %q, want %d", tc.fields, status, body, tc.wantStatus)
			}
			if status != http.StatusOK {
				return
			}
			var got inspection
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatalf("h2 request %v: body %q: %v", tc.fields, body, err)
			}
			if got.Host != tc.wantHost || got.RequestURI != tc.wantURI {
				t.Fatalf("h2 request %v: backend saw Host %q target %q, want %q %q", tc.fields, got.Host, got.RequestURI, tc.wantHost, tc.wantURI)
			}
		})
	}
	t.Run("item0/visitor-leaves-mid-body", func(t *testing.T) {
		for range 5 {
			leaveMidBody(t, st.server.addr, arrived)
		}
		if status, body := get(t, st.visitor, st.server, appHost, "/after"); status != http.StatusOK {
			t.Fatalf("GET after visitors left mid-body = %d %q, want 200", status, body)
		}
	})
}

// leaveMidBody sends a POST promising 100,000 bytes, sends a few, and
// leaves once the backend has the request.
func leaveMidBody(t *testing.T, addr string, arrived <-chan struct{}) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "POST /upload HTTP/1.1\r\nHost: %s\r\nContent-Length: 100000\r\n\r\npartial body", appHost); err != nil {
		t.Fatal(err)
	}
	wait(t, arrived, 10*time.Second, "upload reaching the backend")
}

// rawH2Request sends one h2c prior-knowledge request with exactly fields
// and returns the status and body of the answer.
func rawH2Request(t *testing.T, addr string, fields [][2]string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	conn.SetDeadline(deadline)
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, bufio.NewReader(conn))
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range fields {
		if err := enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			t.Fatal(err)
		}
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	status := 0
	var body strings.Builder
	dec := hpack.NewDecoder(4096, func(f hpack.HeaderField) {
		if f.Name == ":status" {
			status, _ = strconv.Atoi(f.Value)
		}
	})
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("read h2 frame: %v (status %d, body %q)", err, status, body.String())
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := fr.WriteSettingsAck(); err != nil {
					t.Fatal(err)
				}
			}
		case *http2.HeadersFrame:
			if f.StreamID != 1 {
				continue
			}
			if _, err := dec.Write(f.HeaderBlockFragment()); err != nil {
				t.Fatal(err)
			}
			if f.StreamEnded() {
				return status, body.String()
			}
		case *http2.DataFrame:
			if f.StreamID != 1 {
				continue
			}
			body.Write(f.Data())
			if f.StreamEnded() {
				return status, body.String()
			}
		case *http2.RSTStreamFrame:
			t.Fatalf("stream reset: %v (status %d)", f.ErrCode, status)
		case *http2.GoAwayFrame:
			t.Fatalf("goaway: %v (status %d)", f.ErrCode, status)
		}
	}
}
