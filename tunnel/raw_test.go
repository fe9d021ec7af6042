package tunnel

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/testkit/blackhole"
)

// rawTarget is a RawForwarder that dials one TCP listener for the name
// "echo" and refuses every other name.
type rawTarget struct {
	addr string
	mu   sync.Mutex
	got  []RawHeader
}

func (f *rawTarget) ForwardRaw(ctx context.Context, h RawHeader) (io.ReadWriteCloser, error) {
	f.mu.Lock()
	f.got = append(f.got, h)
	f.mu.Unlock()
	if h.Name != "echo" {
		return nil, errors.New("no expose entry " + h.Name)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", f.addr)
}

// serveLoopback listens on 127.0.0.1 and runs accept with the listener in
// a goroutine that wg tracks; the test's cleanup closes the listener and
// waits for wg. It returns the listener's address.
func serveLoopback(t *testing.T, accept func(ln net.Listener, wg *sync.WaitGroup)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		accept(ln, &wg)
	}()
	return ln.Addr().String()
}

// halfCloseEcho accepts connections and echoes each until the peer's
// half-close, then writes "bye" and closes: a protocol that needs the
// half-close to reach it and its answer after it to come back.
func halfCloseEcho(t *testing.T) string {
	t.Helper()
	return serveLoopback(t, func(ln net.Listener, wg *sync.WaitGroup) {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				io.Copy(c, c)
				c.Write([]byte("bye"))
			}()
		}
	})
}

func startRawPair(t *testing.T, kind string, fwd RawForwarder) *pair {
	t.Helper()
	return startPair(t, kind, newHandlerForwarder(t, nil), func(_ *ServerConfig, c *ClientConfig) {
		c.RawForwarder = fwd
	})
}

func TestRawStreamEchoWithHalfClose(t *testing.T) {
	for _, kind := range connKinds {
		t.Run(kind, func(t *testing.T) {
			fwd := &rawTarget{addr: halfCloseEcho(t)}
			p := startRawPair(t, kind, fwd)
			defer p.stop()
			h := RawHeader{Kind: RawTCP, Name: "echo", Port: 2222, Visitor: "203.0.113.7:40000", Local: "192.0.2.1:2222"}
			conn, err := p.session.OpenRaw(context.Background(), h)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// Interactive: each line comes back before the next goes.
			br := bufio.NewReader(conn)
			for _, line := range []string{"ls\n", "whoami\n"} {
				if _, err := conn.Write([]byte(line)); err != nil {
					t.Fatal(err)
				}
				got, err := br.ReadString('\n')
				if err != nil || got != line {
					t.Fatalf("echo of %q: %q, %v", line, got, err)
				}
			}
			// Half-close: the backend sees EOF and still answers.
			if err := conn.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			rest, err := io.ReadAll(br)
			if err != nil || string(rest) != "bye" {
				t.Fatalf("after half-close: %q, %v", rest, err)
			}
			fwd.mu.Lock()
			defer fwd.mu.Unlock()
			if len(fwd.got) != 1 || fwd.got[0] != h {
				t.Fatalf("client saw headers %+v, want [%+v]", fwd.got, h)
			}
		})
	}
}

func TestRawStreamLargeTransfer(t *testing.T) {
	fwd := &rawTarget{addr: halfCloseEcho(t)}
	p := startRawPair(t, "tcp", fwd)
	defer p.stop()
	conn, err := p.session.OpenRaw(context.Background(), RawHeader{Kind: RawTCP, Name: "echo", Port: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	data := make([]byte, 8<<20)
	rand.Read(data)
	go func() {
		conn.Write(data)
		conn.CloseWrite()
	}()
	got, err := io.ReadAll(conn)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, append(data, "bye"...)) {
		t.Fatalf("got %d bytes back, want %d + bye", len(got), len(data))
	}
}

func TestRawStreamRefusals(t *testing.T) {
	fwd := &rawTarget{addr: halfCloseEcho(t)}
	p := startRawPair(t, "pipe", fwd)
	defer p.stop()
	_, err := p.session.OpenRaw(context.Background(), RawHeader{Kind: RawTCP, Name: "nope", Port: 1})
	var re *RawRefusedError
	if !errors.As(err, &re) || !strings.Contains(re.Reason, "no expose entry nope") {
		t.Fatalf("unknown name: %v, want a refusal naming it", err)
	}
	// A target that refuses connections is a refusal too.
	dead := &rawTarget{addr: blackhole.Refused(t)}
	p2 := startRawPair(t, "pipe", dead)
	defer p2.stop()
	if _, err := p2.session.OpenRaw(context.Background(), RawHeader{Kind: RawTCP, Name: "echo", Port: 1}); !errors.As(err, &re) {
		t.Fatalf("dead target: %v, want a refusal", err)
	}
	// The session still serves HTTP after refusals.
	if _, err := p.session.OpenRaw(context.Background(), RawHeader{Kind: RawTCP, Name: "echo", Port: 1}); err != nil {
		t.Fatalf("after refusals: %v", err)
	}
}

func TestRawStreamWithoutForwarder(t *testing.T) {
	p := startRawPair(t, "pipe", nil)
	defer p.stop()
	_, err := p.session.OpenRaw(context.Background(), RawHeader{Kind: RawUDP, Name: "dns", Port: 53})
	var re *RawRefusedError
	if !errors.As(err, &re) || !strings.Contains(re.Reason, ErrRawUnsupported.Error()) {
		t.Fatalf("got %v, want the unsupported refusal", err)
	}
}

func TestRawHeaderValidation(t *testing.T) {
	p := startRawPair(t, "pipe", &rawTarget{})
	defer p.stop()
	for _, h := range []RawHeader{
		{Kind: "sctp", Name: "x"},
		{Kind: RawTCP},
		{Kind: RawTCP, Name: "x\x00y"},
		{Kind: RawTCP, Name: strings.Repeat("n", 256)},
		{Kind: RawTCP, Name: "x", Port: 70000},
		{Kind: RawTCP, Name: "x", Visitor: "no-port"},
		{Kind: RawTLS, Name: "x", Hostname: "a\nb"},
	} {
		if _, err := p.session.OpenRaw(context.Background(), h); err == nil {
			t.Errorf("OpenRaw(%+v) succeeded, want a validation error", h)
		}
	}
}

// A hostile or broken server's raw header never reaches the forwarder and
// never hangs the client: garbage, an oversized length, a truncated frame.
func TestRawStreamHostileHeaders(t *testing.T) {
	fwd := &rawTarget{addr: halfCloseEcho(t)}
	p := startRawPair(t, "pipe", fwd)
	defer p.stop()
	for name, frame := range map[string][]byte{
		"not json":   append([]byte{rawMagic, 0, 0, 0, 3}, "{{{"...),
		"oversized":  {rawMagic, 0xff, 0xff, 0xff, 0xff},
		"zero":       {rawMagic, 0, 0, 0, 0},
		"bad kind":   append([]byte{rawMagic, 0, 0, 0, 26}, `{"kind":"icmp","name":"x"}`...),
		"no name":    append([]byte{rawMagic, 0, 0, 0, 14}, `{"kind":"tcp"}`...),
		"null frame": append([]byte{rawMagic, 0, 0, 0, 4}, `null`...),
	} {
		t.Run(name, func(t *testing.T) {
			ds, _, err := p.session.getFreshStream(t.Context(), false)
			if err != nil {
				t.Fatal(err)
			}
			defer ds.st.Close()
			ds.st.Write(frame)
			ds.st.SetReadDeadline(time.Now().Add(5 * time.Second))
			// The client answers with a refusal or closes; either way the
			// read ends well before the deadline.
			var reply rawReply
			err = readRawFrame(ds.st, &reply)
			if err == nil && reply.OK {
				t.Fatal("hostile header accepted")
			}
			if isTimeout(err) {
				t.Fatalf("client hung on a hostile header: %v", err)
			}
		})
	}
	fwd.mu.Lock()
	defer fwd.mu.Unlock()
	if len(fwd.got) != 0 {
		t.Fatalf("forwarder saw %d hostile headers", len(fwd.got))
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// A client slow to reply (its target's connect hangs) is bounded by the
// caller's context.
func TestRawOpenHonoursContext(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	fwd := rawFunc(func(ctx context.Context, _ RawHeader) (io.ReadWriteCloser, error) {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return nil, errors.New("gave up")
	})
	p := startRawPair(t, "pipe", fwd)
	defer p.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := p.session.OpenRaw(ctx, RawHeader{Kind: RawTCP, Name: "slow", Port: 1})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the deadline", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("OpenRaw returned after %v", el)
	}
}

type rawFunc func(context.Context, RawHeader) (io.ReadWriteCloser, error)

func (f rawFunc) ForwardRaw(ctx context.Context, h RawHeader) (io.ReadWriteCloser, error) {
	return f(ctx, h)
}

// Closing the server's end abandons the client's relay: its target
// connection is closed, so nothing leaks (goleak checks goroutines).
func TestRawConnCloseEndsClientRelay(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	closed := make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		io.Copy(io.Discard, c) // ends when the relay closes the target
		c.Close()
		close(closed)
	}()
	p := startRawPair(t, "pipe", &rawTarget{addr: ln.Addr().String()})
	defer p.stop()
	conn, err := p.session.OpenRaw(context.Background(), RawHeader{Kind: RawTCP, Name: "echo", Port: 1})
	if err != nil {
		t.Fatal(err)
	}
	conn.Write([]byte("hello"))
	conn.Close()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the client kept its target connection after the server closed the stream")
	}
}

func TestRelayIdleClosesBoth(t *testing.T) {
	a1, a2 := net.Pipe()
	b1, b2 := net.Pipe()
	defer a2.Close()
	defer b2.Close()
	done := make(chan struct{})
	go func() {
		Relay(a1, b1, RelayOptions{Idle: 100 * time.Millisecond})
		close(done)
	}()
	// Traffic keeps it open past the idle bound.
	go io.Copy(io.Discard, b2)
	for i := 0; i < 5; i++ {
		if _, err := a2.Write([]byte("x")); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		time.Sleep(50 * time.Millisecond) // the traffic's pace, under the idle bound
	}
	select {
	case <-done:
		t.Fatal("relay closed while traffic flowed")
	default:
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("idle relay not closed")
	}
	if _, err := a2.Write([]byte("x")); err == nil {
		t.Fatal("visitor end still open after idle close")
	}
}

// FuzzRawHeader feeds a raw stream's header bytes, as a hostile server
// would send them, through the client's decoding and checks.
func FuzzRawHeader(f *testing.F) {
	f.Add([]byte{0, 0, 0, 26, '{'})
	f.Add(append([]byte{0, 0, 0, 38}, `{"kind":"tcp","name":"ssh","port":22}`...))
	f.Add(append([]byte{0, 0, 0, 60}, `{"kind":"tls","name":"0","hostname":"a.test","visitor":"[::1]:1"}`...))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h RawHeader
		if err := readRawFrame(bytes.NewReader(b), &h); err != nil {
			return
		}
		if h.validate() == nil {
			if h.Name == "" || h.Port < 0 || h.Port > 65535 {
				t.Fatalf("validate accepted %+v", h)
			}
		}
	})
}

// exposeRegistry answers every announcement's Expose entries with ports
// numbered from 30000, as a server's port manager would.
type exposeRegistry struct{ *fakeRegistry }

func (r exposeRegistry) Update(ctx context.Context, s *Session) []string {
	var st []ExposeStatus
	for i, e := range s.Announcement().Expose {
		st = append(st, ExposeStatus{Name: e.Name, Protocol: e.Protocol, Port: 30000 + i})
	}
	s.SetExposed(st)
	return r.fakeRegistry.Update(ctx, s)
}

func TestExposedReachesClient(t *testing.T) {
	got := make(chan []ExposeStatus, 4)
	var mu sync.Mutex
	entries := []Expose{{Name: "ssh", Protocol: ExposeTCP, RemotePort: 0}}
	p := startPair(t, "pipe", newHandlerForwarder(t, nil), func(s *ServerConfig, c *ClientConfig) {
		s.Registry = exposeRegistry{s.Registry.(*fakeRegistry)}
		c.Announce = func() Announcement {
			a := testAnnouncement()
			mu.Lock()
			a.Expose = append([]Expose(nil), entries...)
			mu.Unlock()
			return a
		}
		c.OnExposed = func(st []ExposeStatus) { got <- st }
	})
	defer p.stop()
	want := []ExposeStatus{{Name: "ssh", Protocol: ExposeTCP, Port: 30000}}
	select {
	case st := <-got:
		if len(st) != 1 || st[0] != want[0] {
			t.Fatalf("welcome carried %+v, want %+v", st, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no answer to the expose entries with the welcome")
	}
	mu.Lock()
	entries = append(entries, Expose{Name: "dns", Protocol: ExposeUDP, RemotePort: 5353})
	mu.Unlock()
	if err := p.client.AnnounceNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case st := <-got:
		if len(st) != 2 || st[1].Name != "dns" || st[1].Port != 30001 {
			t.Fatalf("ack carried %+v, want two entries with dns on 30001", st)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the changed answer never reached the client")
	}
}

func TestExposeValidation(t *testing.T) {
	ok := Expose{Name: "ssh", Protocol: ExposeTCP, RemotePort: 2222, AllowedIPs: []string{"10.0.0.0/8", "192.0.2.1", "::1"}}
	long := make([]string, MaxExposeAllowedIPs+1)
	for i := range long {
		long[i] = "10.0.0.1"
	}
	many := make([]Expose, MaxExpose+1)
	for i := range many {
		many[i] = Expose{Name: "e" + strconv.Itoa(i), Protocol: ExposeTCP}
	}
	for name, tc := range map[string]struct {
		entries []Expose
		ok      bool
	}{
		"valid":           {[]Expose{ok}, true},
		"no name":         {[]Expose{{Protocol: ExposeTCP}}, false},
		"duplicate":       {[]Expose{ok, ok}, false},
		"bad protocol":    {[]Expose{{Name: "x", Protocol: "sctp"}}, false},
		"port too big":    {[]Expose{{Name: "x", Protocol: ExposeUDP, RemotePort: 65536}}, false},
		"negative port":   {[]Expose{{Name: "x", Protocol: ExposeUDP, RemotePort: -1}}, false},
		"bad ip":          {[]Expose{{Name: "x", Protocol: ExposeTCP, AllowedIPs: []string{"evil.example"}}}, false},
		"too many ips":    {[]Expose{{Name: "x", Protocol: ExposeTCP, AllowedIPs: long}}, false},
		"too many":        {many, false},
		"control in name": {[]Expose{{Name: "a\x1bb", Protocol: ExposeTCP}}, false},
		"space in name":   {[]Expose{{Name: "a b", Protocol: ExposeTCP}}, false},
		"port twice":      {[]Expose{{Name: "a", Protocol: ExposeTCP, RemotePort: 2222}, {Name: "b", Protocol: ExposeTCP, RemotePort: 2222}}, false},
		"port per proto":  {[]Expose{{Name: "a", Protocol: ExposeTCP, RemotePort: 53}, {Name: "b", Protocol: ExposeUDP, RemotePort: 53}}, true},
		"two auto ports":  {[]Expose{{Name: "a", Protocol: ExposeTCP}, {Name: "b", Protocol: ExposeTCP}}, true},
	} {
		a := testAnnouncement()
		a.Expose = tc.entries
		if err := a.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", name, err, tc.ok)
		}
	}
}

// TestExposeProblemsBounded: what a hostile client sends is quoted in
// the refusal at most in part, whatever its length.
func TestExposeProblemsBounded(t *testing.T) {
	huge := strings.Repeat("x", 1<<16)
	a := testAnnouncement()
	a.Expose = []Expose{{Name: huge, Protocol: huge, AllowedIPs: []string{huge}}}
	err := a.Validate()
	if err == nil {
		t.Fatal("Validate() = nil for a hostile expose entry")
	}
	if n := len(err.Error()); n > 600 {
		t.Fatalf("Validate() error is %d bytes, want the hostile fields cut: %.200s", n, err)
	}
	for _, want := range []string{"name: longer than 63 bytes", "protocol: ", "allowed_ips: "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %.300v, want it to say %q", err, want)
		}
	}
}

// TestRelayChargeRefusalClosesBoth: Relay asks Charge about each read,
// with its direction; a refused read is dropped, uncounted, and closes
// both ends.
func TestRelayChargeRefusalClosesBoth(t *testing.T) {
	a1, a2 := net.Pipe()
	b1, b2 := net.Pipe()
	defer a2.Close()
	defer b2.Close()
	var mu sync.Mutex
	var toB, toA int64
	charge := func(ab, ba int64) bool {
		mu.Lock()
		defer mu.Unlock()
		if toB+toA >= 6 {
			return false
		}
		toB, toA = toB+ab, toA+ba
		return true
	}
	type counts struct{ ab, ba int64 }
	done := make(chan counts, 1)
	go func() {
		ab, ba := Relay(a1, b1, RelayOptions{Charge: charge})
		done <- counts{ab, ba}
	}()
	go io.Copy(io.Discard, b2)
	for _, msg := range []string{"abc", "def"} {
		if _, err := a2.Write([]byte(msg)); err != nil {
			t.Fatalf("write %q: %v", msg, err)
		}
	}
	a2.Write([]byte("ghi")) // refused: the relay closes both ends
	got := <-done
	if got.ab != 6 || got.ba != 0 {
		t.Errorf("Relay = %d, %d bytes; want 6, 0 (the refused read uncounted)", got.ab, got.ba)
	}
	mu.Lock()
	defer mu.Unlock()
	if toB != 6 || toA != 0 {
		t.Errorf("Charge saw %d a-to-b, %d b-to-a; want 6, 0", toB, toA)
	}
	if _, err := a2.Write([]byte("x")); err == nil {
		t.Error("visitor end still open after the refusal")
	}
}
