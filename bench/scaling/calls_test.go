package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A server's log of one calls run, in the server's text format: the lines
// the calls mode counts, and lines it must not.
const leaseLog = `time=2026-12-07T09:00:00.000Z level=INFO msg="server listening" addr=127.0.0.1:4000
time=2026-12-07T09:00:01.000Z level=DEBUG msg="scaling call deferred" record_id=rec_1 reason=cold_start
time=2026-12-07T09:00:01.100Z level=DEBUG msg="scaling call deferred" record_id=rec_1 reason=cold_start
time=2026-12-07T09:00:03.000Z level=INFO msg="scaling decision dropped" org_id=org_1 hostname=a.calls.test path=/ reason=cold_start why="another server's cold start is under way"
time=2026-12-07T09:00:03.000Z level=INFO msg="scaling decision dropped" org_id=org_1 hostname=a.calls.test.other path=/ reason=cold_start why="another server's cold start is under way"
time=2026-12-07T09:00:03.000Z level=INFO msg="scaling decision dropped" org_id=org_1 hostname=b.calls.test path=/ reason=cold_start why="another server is calling"
time=2026-12-07T09:00:04.000Z level=INFO msg="scaling call" hostname=a.calls.test reason=cold_start
`

func TestCountLeaseLines(t *testing.T) {
	deferred, dropped, err := countLeaseLines(strings.NewReader(leaseLog), "a.calls.test")
	if err != nil || deferred != 2 || dropped != 1 {
		t.Errorf("countLeaseLines = %d deferred, %d dropped, %v; want 2, 1 (only a.calls.test's own hostname field), nil", deferred, dropped, err)
	}
	if _, _, err := countLeaseLines(strings.NewReader(""), "a.calls.test"); err != nil {
		t.Errorf("countLeaseLines(empty) = %v, want nil", err)
	}
}

// TestCountLeaseLinesFrom: only the lines written after the run's offset
// count, and a missing log is an error, not zero.
func TestCountLeaseLinesFrom(t *testing.T) {
	path := filepath.Join(t.TempDir(), "aperio-server.log")
	before := "time=x level=DEBUG msg=\"scaling call deferred\" record_id=rec_0 reason=cold_start\n"
	if err := os.WriteFile(path, []byte(before+leaseLog), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := logSize(path); got != int64(len(before+leaseLog)) {
		t.Errorf("logSize = %d, want %d", got, len(before+leaseLog))
	}
	deferred, dropped, err := countLeaseLinesFrom(path, int64(len(before)), "a.calls.test")
	if err != nil || deferred != 2 || dropped != 1 {
		t.Errorf("countLeaseLinesFrom(after the first line) = %d, %d, %v; want 2, 1, nil", deferred, dropped, err)
	}
	if _, _, err := countLeaseLinesFrom(filepath.Join(t.TempDir(), "none.log"), 0, "a.calls.test"); err == nil {
		t.Error("countLeaseLinesFrom(a missing log) = nil error, want one")
	}
	if got := logSize(filepath.Join(t.TempDir(), "none.log")); got != 0 {
		t.Errorf("logSize(missing) = %d, want 0", got)
	}
}
