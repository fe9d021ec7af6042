package process_test

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pires/go-proxyproto"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/testkit/echotest"
	"github.com/aperio-dev/aperio/internal/testkit/testcert"
)

// ports returns the server's GET /aperio/api/ports.
func (f fleet) ports(t *testing.T, base string) []apitype.PortInfo {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+apitype.Prefix+"/ports", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+f.master)
	resp, err := f.http.Do(req)
	if err != nil {
		t.Fatalf("GET /aperio/api/ports: %v", err)
	}
	defer resp.Body.Close()
	var list []apitype.PortInfo
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /aperio/api/ports = %d, %v, want 200 and a list", resp.StatusCode, err)
	}
	return list
}

// portOf finds port/protocol in list.
func portOf(list []apitype.PortInfo, port int, protocol string) (apitype.PortInfo, bool) {
	for _, p := range list {
		if p.Port == port && p.Protocol == protocol {
			return p, true
		}
	}
	return apitype.PortInfo{}, false
}

// freePorts returns n loopback ports free for both TCP and UDP when
// asked (each held on both while the next is picked, then released).
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var out []int
	var held []io.Closer
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for len(out) < n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ln)
		port := ln.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // taken for UDP: pick another
		}
		held = append(held, pc)
		out = append(out, port)
	}
	return out
}

// proxyBackend accepts TCP connections, reads a PROXY protocol header with
// an independent implementation (go-proxyproto), reports the source
// address it names, and echoes the rest.
func proxyBackend(t *testing.T) (addr string, sources <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 16)
	echotest.Serve(t, ln, func(c net.Conn) {
		c.SetDeadline(time.Now().Add(30 * time.Second))
		br := bufio.NewReader(c)
		h, err := proxyproto.Read(br)
		if err != nil {
			ch <- "error: " + err.Error()
			return
		}
		ch <- h.SourceAddr.String()
		io.Copy(c, br)
	})
	return ln.Addr().String(), ch
}

// TestProcessPublicPorts runs the real binaries: a client's expose
// entries open public TCP and UDP ports on the server, and a serve:
// service publishes a folder.
//
//   - TCP: an interactive exchange line by line, then 4 MiB and a
//     half-close, with every byte echoed back;
//   - PROXY protocol v2: the backend parses the visitor's address;
//   - UDP: 1,000 flows from 16 loopback addresses each get their answer,
//     and a flow idle for udp_idle_timeout is ended (its next datagram
//     is a new flow, which the backend sees from a new source port);
//   - static: Range, the SPA fallback, and a traversal refused;
//   - quick mode: `aperio-client tcp PORT` gets an allocated port and
//     logs it.
func TestProcessPublicPorts(t *testing.T) {
	f := newFleet(t, "ports-master-0123456789")
	ps := freePorts(t, 4)
	srv := f.startServer(t, "APERIO_TCP_PORT_RANGE="+fmt.Sprintf("%d,%d,%d,%d", ps[0], ps[1], ps[2], ps[3]), "APERIO_UDP_IDLE_TIMEOUT=1s",
		// Each UDP flow is a stream of the client's session while it lasts.
		"APERIO_TUNNEL_MAX_STREAMS=2048")

	pxAddr, pxSources := proxyBackend(t)
	dir := t.TempDir()
	public := filepath.Join(dir, "public")
	os.MkdirAll(filepath.Join(public, "assets"), 0o755)
	writeFile(t, filepath.Join(public, "index.html"), "<h1>spa</h1>")
	asset := bytes.Repeat([]byte("0123456789"), 1000)
	writeFile(t, filepath.Join(public, "assets", "app.js"), string(asset))
	writeFile(t, filepath.Join(dir, "secret.txt"), "top secret")
	writeFile(t, filepath.Join(dir, "aperio.yaml"), fmt.Sprintf(`server: {url: %s, token: %s}
name: ports
services:
  - serve: ./public
    hostname: site.test
    spa: true
expose:
  - {name: ssh, target: %s, remote_port: %d}
  - {name: db, target: %s, remote_port: %d, proxy_protocol: v2}
  - {name: dns, protocol: udp, target: %s, remote_port: %d}
`, srv.url, f.master, echotest.TCP(t), ps[0], pxAddr, ps[1], echotest.UDP(t), ps[2]))
	c := exec.Command(filepath.Join(f.bin, "aperio-client"))
	c.Dir = dir
	c.Env = append(os.Environ(), "HOME="+dir)
	l := startLogged(t, c)
	for _, name := range []string{"ssh", "db", "dns"} {
		l.wait(t, regexp.MustCompile(`msg="port open".*expose_name=`+name+` `))
	}

	t.Run("tcp", func(t *testing.T) {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", ps[0]), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(30 * time.Second))
		br := bufio.NewReader(conn)
		for i := range 20 { // keystrokes of a session: one line, one answer
			line := fmt.Sprintf("ls -la %d\n", i)
			io.WriteString(conn, line)
			got, err := br.ReadString('\n')
			if err != nil || got != line {
				t.Fatalf("line %d echoed %q, %v; want %q", i, got, err, line)
			}
		}
		bulk := make([]byte, 4<<20)
		rand.Read(bulk)
		go func() {
			conn.Write(bulk)
			conn.(*net.TCPConn).CloseWrite()
		}()
		back, err := io.ReadAll(br)
		if err != nil || !bytes.Equal(back, bulk) {
			t.Fatalf("bulk echo: %d of %d bytes, equal %v, %v", len(back), len(bulk), bytes.Equal(back, bulk), err)
		}
	})

	t.Run("proxy protocol v2", func(t *testing.T) {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", ps[1]), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(30 * time.Second))
		io.WriteString(conn, "ping")
		conn.(*net.TCPConn).CloseWrite()
		select {
		case src := <-pxSources:
			if src != conn.LocalAddr().String() {
				t.Fatalf("backend's PROXY source = %q, want the visitor %s", src, conn.LocalAddr())
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the backend saw no connection")
		}
		if b, _ := io.ReadAll(conn); string(b) != "ping" {
			t.Fatalf("echo after the header = %q, want ping", b)
		}
	})

	t.Run("udp 1000 flows", func(t *testing.T) {
		const flows, ips = 1000, 16 // at most 64 flows per visitor IP
		target := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: ps[2]}
		var wg sync.WaitGroup
		errs := make(chan error, flows)
		sem := make(chan struct{}, 100)
		for i := range flows {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				local := &net.UDPAddr{IP: net.IPv4(127, 0, 1, byte(1+i%ips))}
				c, err := net.DialUDP("udp", local, target)
				if err != nil {
					errs <- err
					return
				}
				defer c.Close()
				msg := fmt.Sprintf("query-%d", i)
				buf := make([]byte, 256)
				// UDP may drop: a few tries, as a resolver would.
				for try := 0; try < 5; try++ {
					c.Write([]byte(msg))
					c.SetReadDeadline(time.Now().Add(2 * time.Second))
					n, err := c.Read(buf)
					if err == nil {
						if string(buf[:n]) != "echo:"+msg {
							errs <- fmt.Errorf("flow %d answered %q", i, buf[:n])
						}
						return
					}
				}
				errs <- fmt.Errorf("flow %d: no answer after 5 tries", i)
			})
		}
		wg.Wait()
		close(errs)
		n := 0
		for err := range errs {
			if n < 5 {
				t.Error(err)
			}
			n++
		}
		if n > 0 {
			t.Fatalf("%d of %d flows failed", n, flows)
		}
	})

	t.Run("udp idle expiry", func(t *testing.T) {
		// Every flow of the subtest above ends after udp_idle_timeout (1s)
		// without a datagram: the port lists none open, and a visitor
		// who comes back is served by a new flow.
		waitFor(t, "GET /aperio/api/ports to list no udp flow open", func() bool {
			p, ok := portOf(f.ports(t, srv.url), ps[2], "udp")
			return ok && p.Open == 0
		})
		c, err := net.DialUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 2, 1)}, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: ps[2]})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		buf := make([]byte, 64)
		for try := 0; ; try++ {
			c.Write([]byte("again"))
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			if n, err := c.Read(buf); err == nil {
				if string(buf[:n]) != "echo:again" {
					t.Fatalf("answer = %q", buf[:n])
				}
				break
			}
			if try == 4 {
				t.Fatal("no answer on a new flow after the idle expiry")
			}
		}
		if p, _ := portOf(f.ports(t, srv.url), ps[2], "udp"); p.Open != 1 {
			t.Fatalf("flows open after one new visitor = %d, want 1", p.Open)
		}
	})

	t.Run("api ports", func(t *testing.T) {
		out, err := exec.Command(filepath.Join(f.bin, "aperio-client"), "api", "ports", "--server-url", srv.url, "--api-key", f.master).CombinedOutput()
		if err != nil {
			t.Fatalf("aperio-client api ports: %v\n%s", err, out)
		}
		for _, want := range []string{"PORT", "ENTRIES", fmt.Sprintf("%d", ps[0]), "ssh", "db", "dns", "udp"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("aperio-client api ports lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("api explain a port", func(t *testing.T) {
		run := func(args ...string) string {
			t.Helper()
			out, err := exec.Command(filepath.Join(f.bin, "aperio-client"), append([]string{"api", "explain", "--server-url", srv.url, "--api-key", f.master}, args...)...).CombinedOutput()
			if err != nil {
				t.Fatalf("aperio-client api explain %v: %v\n%s", args, err, out)
			}
			return string(out)
		}
		if out := run(fmt.Sprintf("tcp://127.0.0.1:%d", ps[0]), "--ip", "203.0.113.9"); !strings.Contains(out, "relayed to ssh") {
			t.Errorf("explain of the ssh port:\n%s", out)
		}
		if out := run(fmt.Sprintf("udp://127.0.0.1:%d", ps[0])); !strings.Contains(out, fmt.Sprintf("no client holds %d/udp", ps[0])) {
			t.Errorf("explain of a port nobody holds for udp:\n%s", out)
		}
	})

	t.Run("static", func(t *testing.T) {
		req, _ := http.NewRequest("GET", srv.url+"/assets/app.js", nil)
		req.Host = "site.test"
		req.Header.Set("Range", "bytes=100-199")
		resp, err := f.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(b, asset[100:200]) {
			t.Fatalf("Range = %d, %d bytes, want 206 with bytes 100-199", resp.StatusCode, len(b))
		}
		if code, body := getHost(t, f.http, srv.url, "site.test", "/settings/profile"); code != 200 || body != "<h1>spa</h1>" {
			t.Fatalf("SPA fallback = %d %q", code, body)
		}
		for _, p := range []string{"/../secret.txt", "/%2e%2e/secret.txt", "/assets/..%2f..%2fsecret.txt"} {
			code, body := getHost(t, f.http, srv.url, "site.test", p)
			if strings.Contains(body, "top secret") || code == 200 && !strings.Contains(body, "<h1>spa</h1>") {
				t.Fatalf("GET %s = %d %q: the file outside the folder leaked", p, code, body)
			}
		}
	})

	t.Run("quick mode", func(t *testing.T) {
		q := exec.Command(filepath.Join(f.bin, "aperio-client"), "tcp", strings.TrimPrefix(echotest.TCP(t), "127.0.0.1:"),
			"--server-url", srv.url, "--server-token", f.master, "--name", "quick")
		q.Dir = t.TempDir()
		q.Env = append(os.Environ(), "HOME="+q.Dir)
		ql := startLogged(t, q)
		public := ql.wait(t, regexp.MustCompile(`msg="port open".*public_url=(\S+)`))
		// Free for TCP in the range: ps[3], and ps[2], which only UDP holds.
		if public != fmt.Sprintf("127.0.0.1:%d", ps[3]) && public != fmt.Sprintf("127.0.0.1:%d", ps[2]) {
			t.Fatalf("quick mode's port = %s, want one free for tcp in the range (%d or %d)", public, ps[2], ps[3])
		}
		conn, err := net.DialTimeout("tcp", public, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(20 * time.Second))
		io.WriteString(conn, "quick")
		conn.(*net.TCPConn).CloseWrite()
		if b, _ := io.ReadAll(conn); string(b) != "quick" {
			t.Fatalf("echo through the allocated port = %q", b)
		}
	})
}

// TestProcessTLSPassthrough runs the real binaries: the server speaks TLS
// with its own certificate, and a service with tls_passthrough gets the
// TLS connections for its hostname unterminated: the visitor completes a
// handshake with the backend's own certificate (from another CA, for a
// name the server holds no certificate for) and talks to it end to end,
// while other hostnames still get the server's certificate.
func TestProcessTLSPassthrough(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "passthrough-master-0123456789")
	dir := t.TempDir()
	serverCA, backendCA := testcert.NewCA(t, "server ca"), testcert.NewCA(t, "backend ca")
	srvCert := serverCA.Issue(t, testcert.Leaf{CommonName: "server", DNSNames: []string{"localhost", "app.test"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Usage: x509.ExtKeyUsageServerAuth})
	writeFile(t, filepath.Join(dir, "server.pem"), string(srvCert.CertPEM))
	writeFile(t, filepath.Join(dir, "server.key"), string(srvCert.KeyPEM))
	writeFile(t, filepath.Join(dir, "ca.pem"), string(serverCA.CertPEM))
	srv := startServer(t, f.bin, "APERIO_SERVER_TOKEN="+f.master, "APERIO_TLS_CERT="+filepath.Join(dir, "server.pem"), "APERIO_TLS_KEY="+filepath.Join(dir, "server.key"))
	base := strings.Replace(srv.url, "http://", "https://", 1)

	// The backend: TLS with its own certificate, answering each line
	// with "vault:" and the line.
	beCert := backendCA.Issue(t, testcert.Leaf{CommonName: "vault", DNSNames: []string{"vault.test"}, Usage: x509.ExtKeyUsageServerAuth})
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{beCert.Pair(t)}})
	if err != nil {
		t.Fatal(err)
	}
	echotest.Serve(t, ln, func(c net.Conn) {
		c.SetDeadline(time.Now().Add(20 * time.Second))
		if line, err := bufio.NewReader(c).ReadString('\n'); err == nil {
			io.WriteString(c, "vault:"+line)
		}
	})

	writeFile(t, filepath.Join(dir, "aperio.yaml"), fmt.Sprintf(`server: {url: %s, token: %s}
name: vault
services:
  - hostname: vault.test
    target: %s
    tls_passthrough: true
`, base, f.master, ln.Addr()))
	c := exec.Command(filepath.Join(f.bin, "aperio-client"))
	c.Dir = dir
	// The client trusts the server's CA for its tunnel.
	c.Env = append(os.Environ(), "HOME="+dir, "SSL_CERT_FILE="+filepath.Join(dir, "ca.pem"))
	startLogged(t, c).wait(t, regexp.MustCompile(`msg="tunnel connected"`))

	addr := strings.TrimPrefix(srv.url, "http://")
	dial := func(name string, roots *x509.CertPool) (*tls.Conn, error) {
		d := &net.Dialer{Timeout: 5 * time.Second}
		return tls.DialWithDialer(d, "tcp", addr, &tls.Config{ServerName: name, RootCAs: roots})
	}
	var conn *tls.Conn
	waitFor(t, "a handshake for vault.test with the backend's certificate", func() bool {
		conn, err = dial("vault.test", backendCA.Pool())
		return err == nil
	})
	defer conn.Close()
	if got := conn.ConnectionState().PeerCertificates[0].Subject.CommonName; got != "vault" {
		t.Fatalf("certificate of vault.test = %q, want the backend's own", got)
	}
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(conn, "unseal\n")
	if b, err := io.ReadAll(conn); err != nil || string(b) != "vault:unseal\n" {
		t.Fatalf("answer through the passed-through TLS = %q, %v", b, err)
	}
	// Another name is the server's own TLS.
	other, err := dial("app.test", serverCA.Pool())
	if err != nil {
		t.Fatalf("handshake for app.test with the server's certificate: %v", err)
	}
	other.Close()
}
