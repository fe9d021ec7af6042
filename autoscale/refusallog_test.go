package autoscale

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aperio-dev/aperio/tunnel"
)

// TestRefusalLogIsRateLimited: a flood of refused declarations writes one
// log line per refusalLogInterval, the next one counting those it kept
// quiet about.
func TestRefusalLogIsRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, nil))
		l := newRefusalLog()
		id := tunnel.Identity{TokenID: "tok_b", OrgID: "org_b"}
		errCap := errors.New("cap")
		for range 100 {
			l.refused(log, id, "sess", 1000, "h0.flood.test", errCap)
		}
		if n := strings.Count(buf.String(), "scaling declarations refused"); n != 1 {
			t.Fatalf("100 refused announcements at once wrote %d log lines, want 1:\n%s", n, buf.String())
		}
		time.Sleep(refusalLogInterval)
		l.refused(log, id, "sess", 1000, "h0.flood.test", errCap)
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if len(lines) != 2 || !strings.Contains(lines[1], "suppressed=99000") {
			t.Fatalf("log after refusalLogInterval = %q, want a second line with suppressed=99000", lines)
		}
	})
}
