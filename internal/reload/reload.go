// Package reload owns when a binary reloads its configuration: on SIGHUP,
// and once a change to one of its files has settled (debounced). It watches
// the files' parent directories, not the files, so that an editor that
// replaces a file by rename, or a Kubernetes ConfigMap's symlink swap, is
// seen like an edit in place. What a reload does is the caller's.
package reload

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/aperio-dev/aperio/internal/logkey"
)

// DefaultDebounce is the quiet time after the last event in a watched
// directory before the files are compared: an editor's save (write,
// rename, chmod) or a ConfigMap's swap is one change, not several.
const DefaultDebounce = 500 * time.Millisecond

// Bounds on what one Watch holds, whatever Files returns.
const (
	// maxFiles bounds the files watched; the rest are logged and ignored.
	maxFiles = 256
	// maxFileBytes bounds the bytes of one file read to tell whether it
	// changed; a longer file is compared by its first maxFileBytes and
	// its size.
	maxFileBytes = 16 << 20
	// maxDebounceRounds bounds how long a directory that never goes
	// quiet delays the comparison: at most this many debounce periods
	// after the first event.
	maxDebounceRounds = 8
)

// Options configure Watch.
type Options struct {
	// Files returns the files whose change triggers a reload: the config
	// file and what it includes. It is called when Watch starts and again
	// after each OnChange, since a reload may include other files. Nil or
	// empty watches no file.
	Files func() []string
	// Debounce is the quiet time after the last event before the files
	// are compared. Zero means DefaultDebounce.
	Debounce time.Duration
	// Signal reloads on SIGHUP too. While Watch runs, SIGHUP does not end
	// the process; once Watch returns, it does again (the default action).
	Signal bool
	// Log receives the watch's own problems (a directory that cannot be
	// watched, a file that cannot be read); nil discards them.
	Log *slog.Logger
	// OnChange is called with "SIGHUP" or "file changed: PATH" (PATH as
	// Files named it). Calls are serialized: Watch calls it from its own
	// goroutine and waits for it to return. Required.
	OnChange func(reason string)
	// Started, when set, is called once Watch watches the files'
	// directories and (with Signal) catches SIGHUP, before it waits for
	// either: a caller may wait for it before it serves, so that a
	// SIGHUP from then on reloads rather than ends the process.
	Started func()
}

// Watch calls o.OnChange on SIGHUP (when o.Signal) and after a debounced
// change of the content of any file o.Files names (created, removed,
// written, replaced by rename, or its symlink retargeted), until ctx ends.
// A file is compared by content, so an event that leaves every file as it
// was (a touch, another file of the directory) triggers nothing. It
// blocks; it returns nil when ctx ends and an error only when the watch
// cannot start.
func Watch(ctx context.Context, o Options) error {
	if o.OnChange == nil {
		return errors.New("reload: Options.OnChange is required")
	}
	if o.Debounce <= 0 {
		o.Debounce = DefaultDebounce
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("reload: start watching: %w", err)
	}
	defer fw.Close()
	var hup chan os.Signal
	if o.Signal {
		hup = make(chan os.Signal, 1) // one pending reload covers several signals
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}
	w := &watcher{o: o, fw: fw, dirs: map[string]bool{}}
	w.refresh(time.Time{})
	if o.Started != nil {
		o.Started()
	}
	return w.loop(ctx, hup)
}

// watcher is the state of one Watch, owned by its goroutine.
type watcher struct {
	o     Options
	fw    *fsnotify.Watcher
	files []string          // as Files named them, at most maxFiles
	seen  map[string]string // file → fingerprint at the last comparison
	dirs  map[string]bool   // directories watched
}

// loop waits for signals and events until ctx ends.
func (w *watcher) loop(ctx context.Context, hup <-chan os.Signal) error {
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	var first time.Time // the first event of the pending round; zero when none
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			w.seen = w.fingerprints()
			if w.change("SIGHUP") {
				debounce.Reset(w.o.Debounce)
			}
		case ev, ok := <-w.fw.Events:
			if !ok {
				return nil
			}
			if !w.dirs[filepath.Dir(ev.Name)] && !w.dirs[ev.Name] {
				continue
			}
			now := time.Now()
			if first.IsZero() {
				first = now
			}
			wait := w.o.Debounce
			if limit := first.Add(maxDebounceRounds * w.o.Debounce); now.Add(wait).After(limit) {
				wait = max(limit.Sub(now), 0)
			}
			debounce.Reset(wait)
		case err, ok := <-w.fw.Errors:
			if !ok {
				return nil
			}
			// An overflow loses events: compare anyway, soon.
			w.o.Log.Warn("config watch error", logkey.Err, err)
			if first.IsZero() {
				first = time.Now()
			}
			debounce.Reset(w.o.Debounce)
		case <-debounce.C:
			first = time.Time{}
			now := w.fingerprints()
			if f := changed(w.files, w.seen, now); f != "" {
				w.seen = now
				if w.change("file changed: " + f) {
					debounce.Reset(w.o.Debounce)
				}
			}
		}
	}
}

// change calls OnChange, then watches the files the reload may have added.
// It reports whether a file the reload added was modified while the
// reload ran: its content may not be what the reload read, so the caller
// compares again after the debounce.
func (w *watcher) change(reason string) (recheck bool) {
	start := time.Now()
	w.o.OnChange(reason)
	return w.refresh(start)
}

// refresh reads Files again, watches the directories of the files (and of
// their symlinks' targets) and stops watching the others; new files get a
// fingerprint, the others keep theirs. A new file modified at or after
// since (a reload's start; zero: never) gets no fingerprint of its own,
// so the next comparison counts it changed: an edit made between the
// reload reading it and this fingerprint would be lost otherwise. It
// reports whether any such file exists.
func (w *watcher) refresh(since time.Time) (recheck bool) {
	var files []string
	if w.o.Files != nil {
		files = w.o.Files()
	}
	if len(files) > maxFiles {
		w.o.Log.Warn("config watch: too many files, the rest are not watched", logkey.Limit, maxFiles)
		files = files[:maxFiles]
	}
	w.files = files
	want := map[string]bool{}
	for _, f := range files {
		abs, err := filepath.Abs(f)
		if err != nil {
			continue
		}
		want[filepath.Dir(abs)] = true
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			want[filepath.Dir(real)] = true
		}
	}
	for d := range w.dirs {
		if !want[d] {
			w.fw.Remove(d) // gone already or not: either way no longer watched
			delete(w.dirs, d)
		}
	}
	for d := range want {
		if w.dirs[d] {
			continue
		}
		if err := w.fw.Add(d); err != nil {
			w.o.Log.Warn("config watch: directory not watched", logkey.Path, d, logkey.Err, err)
			continue
		}
		w.dirs[d] = true
	}
	seen := map[string]string{}
	for _, f := range files {
		if fp, ok := w.seen[f]; ok {
			seen[f] = fp
			continue
		}
		// The fingerprint first, then the time: a write after the time
		// check but before the read would otherwise pass unseen (its
		// event compares the same content). Its directory is watched by
		// now, so a later write is an event.
		seen[f] = fingerprint(f)
		if !since.IsZero() && modifiedSince(f, since) {
			seen[f] = "modified while the reload that added it ran"
			recheck = true
		}
	}
	w.seen = seen
	return recheck
}

// mtimeSlack is how far a file's modification time may lag the clock: the
// kernel stamps files from its coarse clock, up to a tick (1 to 10 ms)
// behind time.Now. Erring early costs at most one reload that changes
// nothing, of a file modified just before the reload that added it.
const mtimeSlack = 100 * time.Millisecond

// modifiedSince reports whether the file at path (following symlinks) was
// modified at or after t, give or take mtimeSlack.
func modifiedSince(path string, t time.Time) bool {
	st, err := os.Stat(path)
	return err == nil && !st.ModTime().Before(t.Add(-mtimeSlack))
}

// fingerprints returns the fingerprint of every watched file now.
func (w *watcher) fingerprints() map[string]string {
	m := make(map[string]string, len(w.files))
	for _, f := range w.files {
		m[f] = fingerprint(f)
	}
	return m
}

// changed returns the first of files whose fingerprint differs between
// before and now, or "".
func changed(files []string, before, now map[string]string) string {
	for _, f := range files {
		if before[f] != now[f] {
			return f
		}
	}
	return ""
}

// fingerprint identifies the content of the file at path (following
// symlinks): its size and a hash of its first maxFileBytes, "missing" or
// the error that kept it from being read.
func fingerprint(path string) string {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return "missing"
	}
	if err != nil {
		return "unreadable: " + err.Error()
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, maxFileBytes))
	if err != nil {
		return "unreadable: " + err.Error()
	}
	size := n
	if st, err := f.Stat(); err == nil {
		size = st.Size()
	}
	return fmt.Sprintf("%d:%x", size, h.Sum(nil))
}
