package agent

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// freezer relays TCP connections to a backend until frozen; from then on
// it moves no byte either way and closes nothing, which is how a backend
// that vanished without a FIN (a frozen container, a dropped route) looks.
type freezer struct {
	ln     net.Listener
	target string
	frozen chan struct{}
	done   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
}

func newFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln, target: target, frozen: make(chan struct{}), done: make(chan struct{})}
	f.wg.Add(1)
	go f.serve()
	t.Cleanup(func() {
		f.freeze()
		close(f.done)
		ln.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return f
}

func (f *freezer) freeze() { f.once.Do(func() { close(f.frozen) }) }

func (f *freezer) serve() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", f.target)
		if err != nil {
			c.Close()
			continue
		}
		f.mu.Lock()
		f.conns = append(f.conns, c, b)
		f.mu.Unlock()
		f.wg.Add(2)
		go f.pipe(c, b)
		go f.pipe(b, c)
	}
}

// pipe copies src to dst; once frozen it swallows what it reads and
// waits for the test's end.
func (f *freezer) pipe(dst, src net.Conn) {
	defer f.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-f.frozen:
			<-f.done
			return
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestBackendH2ConnectionPinged: a request on an HTTP/2 connection to a
// backend that went silent fails once the transport's ping goes
// unanswered, instead of hanging until the visitor gives up.
func TestBackendH2ConnectionPinged(t *testing.T) {
	backend := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			t.Errorf("backend got %s, want HTTP/2", r.Proto)
		}
		io.WriteString(w, "ok")
	}))
	backend.Config.Protocols = new(http.Protocols)
	backend.Config.Protocols.SetUnencryptedHTTP2(true)
	backend.Start()
	defer backend.Close()
	relay := newFreezer(t, backend.Listener.Addr().String())
	const pingAfter = 200 * time.Millisecond
	tr := newTransport(false, true, pingAfter)
	defer tr.CloseIdleConnections()
	url := "http://" + relay.ln.Addr().String() + "/"

	get := func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.ReadAll(resp.Body)
		return err
	}
	if err := get(context.Background()); err != nil {
		t.Fatalf("first request: %v", err)
	}
	relay.freeze()
	// Far longer than ping + timeout (300 ms): reaching it means no ping.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	err := get(ctx)
	if err == nil {
		t.Fatal("request through a frozen connection succeeded")
	}
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Fatalf("request hung until its deadline (%v after %v): the silent connection was never pinged", err, time.Since(start))
	}
}
