package reload

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// recorder collects OnChange's reasons and checks that calls never overlap.
type recorder struct {
	reasons chan string
	active  atomic.Int32
	overlap atomic.Bool
	hold    time.Duration // how long each call takes
}

func newRecorder() *recorder { return &recorder{reasons: make(chan string, 64)} }

func (r *recorder) onChange(reason string) {
	if r.active.Add(1) > 1 {
		r.overlap.Store(true)
	}
	if r.hold > 0 {
		time.Sleep(r.hold) // the work of a reload, not a wait for state
	}
	r.active.Add(-1)
	r.reasons <- reason
}

// next returns the next reason, failing after a generous timeout.
func (r *recorder) next(t testing.TB) string {
	t.Helper()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case s := <-r.reasons:
		return s
	case <-timer.C:
		t.Fatal("OnChange not called within 10s")
		return ""
	}
}

// none fails if OnChange is called within d.
func (r *recorder) none(t testing.TB, d time.Duration) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case s := <-r.reasons:
		t.Fatalf("OnChange(%q) called, want no call", s)
	case <-timer.C:
	}
}

// start runs Watch until the test ends and returns once it watches.
func start(t *testing.T, o Options) {
	t.Helper()
	ready := make(chan struct{})
	if o.Started != nil {
		t.Fatal("start sets Options.Started itself")
	}
	o.Started = func() { close(ready) }
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	wg.Go(func() { errc <- Watch(ctx, o) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		if err := <-errc; err != nil {
			t.Errorf("Watch = %v, want nil after cancel", err)
		}
	})
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case <-ready:
	case <-timer.C:
		t.Fatal("Watch not watching within 10s")
	}
}

func write(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestWatchDebouncesBurstOfWrites(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "aperio.yaml")
	write(t, f, "a: 0\n")
	rec := newRecorder()
	start(t, Options{Files: func() []string { return []string{f} }, Debounce: 200 * time.Millisecond, OnChange: rec.onChange})
	for i := range 5 {
		write(t, f, strings.Repeat("a: 1\n", i+1))
		time.Sleep(20 * time.Millisecond) // a burst: writes closer than Debounce
	}
	if got, want := rec.next(t), "file changed: "+f; got != want {
		t.Fatalf("OnChange after a burst of writes = %q, want %q", got, want)
	}
	rec.none(t, time.Second)
}

func TestWatchIgnoresOtherFilesAndSameContent(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "aperio.yaml")
	write(t, f, "a: 0\n")
	rec := newRecorder()
	start(t, Options{Files: func() []string { return []string{f} }, Debounce: 50 * time.Millisecond, OnChange: rec.onChange})
	write(t, filepath.Join(dir, "other.yaml"), "b: 1\n")
	write(t, f, "a: 0\n") // same content
	rec.none(t, 500*time.Millisecond)
}

// TestWatchRenameReplace: an editor writes a temporary file and renames it
// over the config file; the directory watch sees it.
func TestWatchRenameReplace(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "aperio.yaml")
	write(t, f, "a: 0\n")
	rec := newRecorder()
	start(t, Options{Files: func() []string { return []string{f} }, Debounce: 50 * time.Millisecond, OnChange: rec.onChange})
	for i := range 2 { // twice: the second replace is seen too (the inode changed)
		tmp := filepath.Join(dir, ".aperio.yaml.swp")
		write(t, tmp, strings.Repeat("a: 2\n", i+1))
		if err := os.Rename(tmp, f); err != nil {
			t.Fatal(err)
		}
		if got, want := rec.next(t), "file changed: "+f; got != want {
			t.Fatalf("OnChange after rename-replace %d = %q, want %q", i, got, want)
		}
	}
}

// TestWatchSymlinkSwap: a Kubernetes ConfigMap's layout, where the file is
// a symlink through ..data, and an update retargets ..data atomically.
func TestWatchSymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []string{"v1", "v2"} {
		if err := os.Mkdir(filepath.Join(dir, v), 0o700); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, v, "aperio.yaml"), "version: "+v+"\n")
	}
	if err := os.Symlink("v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "aperio.yaml")
	if err := os.Symlink("..data/aperio.yaml", f); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	start(t, Options{Files: func() []string { return []string{f} }, Debounce: 50 * time.Millisecond, OnChange: rec.onChange})
	if err := os.Symlink("v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if got, want := rec.next(t), "file changed: "+f; got != want {
		t.Fatalf("OnChange after the symlink swap = %q, want %q", got, want)
	}
}

// TestWatchFollowsFiles: Files is read again after each OnChange, so a
// file a reload added is watched from then on.
func TestWatchFollowsFiles(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	f, inc := filepath.Join(dir, "aperio.yaml"), filepath.Join(other, "routes.yaml")
	write(t, f, "a: 0\n")
	write(t, inc, "r: 0\n")
	var files atomic.Pointer[[]string]
	files.Store(&[]string{f})
	rec := newRecorder()
	start(t, Options{Files: func() []string { return *files.Load() }, Debounce: 50 * time.Millisecond, OnChange: func(reason string) {
		files.Store(&[]string{f, inc})
		rec.onChange(reason)
	}})
	write(t, inc, "r: 1\n") // not watched yet
	rec.none(t, 300*time.Millisecond)
	write(t, f, "a: 1\ninclude: routes.yaml\n")
	if got, want := rec.next(t), "file changed: "+f; got != want {
		t.Fatalf("OnChange = %q, want %q", got, want)
	}
	// The watch on the included file's directory is added after OnChange
	// returns; one edit made right after the reload is seen all the same
	// (through the watch, or, made before the watch, by its time).
	write(t, inc, "r: 2\n")
	if got, want := rec.next(t), "file changed: "+inc; got != want {
		t.Fatalf("OnChange after editing the included file = %q, want %q", got, want)
	}
}

// TestWatchEditDuringReloadNotLost: a file a reload adds, edited after the
// reload read it but before the watcher took its fingerprint, reloads
// again: the edit is not lost (the CI flake of
// TestProcessReloadBrokenEditKeepsOld).
func TestWatchEditDuringReloadNotLost(t *testing.T) {
	dir := t.TempDir()
	f, inc := filepath.Join(dir, "aperio.yaml"), filepath.Join(dir, "more.yaml")
	write(t, f, "a: 0\n")
	write(t, inc, "m: 0\n")
	var files atomic.Pointer[[]string]
	files.Store(&[]string{f})
	var calls atomic.Int32
	rec := newRecorder()
	start(t, Options{Files: func() []string { return *files.Load() }, Debounce: 50 * time.Millisecond, OnChange: func(reason string) {
		files.Store(&[]string{f, inc})
		if calls.Add(1) == 1 {
			// The reload has read inc ("m: 0"); the operator saves again.
			write(t, inc, "m: 1\n")
		}
		rec.onChange(reason)
	}})
	write(t, f, "a: 1\ninclude: more.yaml\n")
	if got, want := rec.next(t), "file changed: "+f; got != want {
		t.Fatalf("OnChange = %q, want %q", got, want)
	}
	if got, want := rec.next(t), "file changed: "+inc; got != want {
		t.Fatalf("OnChange after the edit made during the reload = %q, want %q", got, want)
	}
}

// TestWatchSIGHUP sends this test process a real SIGHUP: OnChange gets
// "SIGHUP", the process lives on, and calls never overlap even when
// signals and edits come while a reload runs.
func TestWatchSIGHUP(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "aperio.yaml")
	write(t, f, "a: 0\n")
	rec := newRecorder()
	rec.hold = 100 * time.Millisecond
	start(t, Options{Files: func() []string { return []string{f} }, Debounce: 20 * time.Millisecond, Signal: true, OnChange: rec.onChange})
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if got := rec.next(t); got != "SIGHUP" {
		t.Fatalf("OnChange after SIGHUP = %q, want SIGHUP", got)
	}
	for range 3 {
		if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		write(t, f, "a: "+time.Now().String()+"\n")
		time.Sleep(30 * time.Millisecond)
	}
	rec.next(t)
	rec.next(t)
	if rec.overlap.Load() {
		t.Fatal("OnChange calls overlapped, want them serialized")
	}
}

func TestWatchNeedsOnChange(t *testing.T) {
	if err := Watch(context.Background(), Options{}); err == nil {
		t.Fatal("Watch without OnChange = nil, want an error")
	}
}

// TestWatchMissingDirectory: a file in a directory that does not exist is
// not watched, and Watch still runs (SIGHUP would still reload).
func TestWatchMissingDirectory(t *testing.T) {
	rec := newRecorder()
	f := filepath.Join(t.TempDir(), "gone", "aperio.yaml")
	start(t, Options{Files: func() []string { return []string{f} }, Debounce: 20 * time.Millisecond, OnChange: rec.onChange})
	rec.none(t, 200*time.Millisecond)
}
