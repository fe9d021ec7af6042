package acme

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/aperio-dev/aperio/store"
)

// Lock timing: a lock is taken for lockTTL and refreshed every
// lockRefresh while held, so a server that dies mid-issuance frees the
// name within lockTTL; a waiter polls every lockPoll (plus jitter).
const (
	lockTTL     = 60 * time.Second
	lockRefresh = 20 * time.Second
	lockPoll    = time.Second
)

// Storage is certmagic's storage over Aperio's store: every server that
// shares the database shares the ACME account, the certificates and the
// locks, so a name is obtained once for the cluster, and a challenge one
// server started can be answered by another.
type Storage struct {
	db    *store.DB
	owner string // this process, as lock owner

	mu    sync.Mutex
	held  map[string]context.CancelFunc // lock name → stops its refresher
	timer func(time.Duration) <-chan time.Time
}

var _ certmagic.Storage = (*Storage)(nil)

// NewStorage returns the storage over db.
func NewStorage(db *store.DB) *Storage {
	var b [8]byte
	rand.Read(b[:])
	return &Storage{db: db, owner: "aperio-" + hex.EncodeToString(b[:]), held: map[string]context.CancelFunc{}, timer: time.After}
}

// Store implements certmagic.Storage.
func (s *Storage) Store(ctx context.Context, key string, value []byte) error {
	return s.db.ACMEPut(ctx, key, value)
}

// Load implements certmagic.Storage; a missing key is fs.ErrNotExist.
func (s *Storage) Load(ctx context.Context, key string) ([]byte, error) {
	v, err := s.db.ACMEGet(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("acme storage: %s: %w", key, fs.ErrNotExist)
	}
	return v, err
}

// Delete implements certmagic.Storage: key and everything under it.
func (s *Storage) Delete(ctx context.Context, key string) error {
	_, err := s.db.ACMEDelete(ctx, key)
	return err
}

// Exists implements certmagic.Storage: a value or a directory. A value is
// looked up by its key first: ACMEList matches its prefix with a pattern
// no index serves, a scan of every stored key, which storedFor made once
// per note of an organization (500 notes: 500 scans of 1000 keys, half a
// minute under the race detector). Only a key that is no value is listed.
func (s *Storage) Exists(ctx context.Context, key string) bool {
	if _, err := s.db.ACMEGet(ctx, key); err == nil {
		return true
	}
	items, err := s.db.ACMEList(ctx, key)
	return err == nil && len(items) > 0
}

// List implements certmagic.Storage: the keys under dir, all of them when
// recursive, else its direct children (values and directories).
func (s *Storage) List(ctx context.Context, dir string, recursive bool) ([]string, error) {
	dir = strings.TrimSuffix(dir, "/")
	items, err := s.db.ACMEList(ctx, dir)
	if err != nil {
		return nil, err
	}
	var out []string
	seen := map[string]bool{}
	for _, it := range items {
		if it.Key == dir {
			continue // the directory's own value, not a child
		}
		k := it.Key
		if !recursive {
			rest := strings.TrimPrefix(k, dir+"/")
			if dir == "" {
				rest = k
			}
			first, _, _ := strings.Cut(rest, "/")
			k = path.Join(dir, first)
		}
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("acme storage: %s: %w", dir, fs.ErrNotExist)
	}
	return out, nil
}

// Stat implements certmagic.Storage.
func (s *Storage) Stat(ctx context.Context, key string) (certmagic.KeyInfo, error) {
	items, err := s.db.ACMEList(ctx, key)
	if err != nil {
		return certmagic.KeyInfo{}, err
	}
	for _, it := range items {
		if it.Key == key {
			return certmagic.KeyInfo{Key: key, Modified: it.Modified, Size: it.Size, IsTerminal: true}, nil
		}
	}
	if len(items) > 0 {
		return certmagic.KeyInfo{Key: key, IsTerminal: false}, nil
	}
	return certmagic.KeyInfo{}, fmt.Errorf("acme storage: %s: %w", key, fs.ErrNotExist)
}

// Lock implements certmagic.Locker: it waits until this process holds
// name (or ctx ends), then keeps the lock fresh until Unlock.
func (s *Storage) Lock(ctx context.Context, name string) error {
	for {
		held, err := s.db.ACMELock(ctx, name, s.owner, lockTTL)
		if err != nil {
			return fmt.Errorf("acme storage: lock %s: %w", name, err)
		}
		if held {
			break
		}
		jitter, _ := rand.Int(rand.Reader, big.NewInt(int64(lockPoll/2)))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.timer(lockPoll + time.Duration(jitter.Int64())):
		}
	}
	rctx, cancel := context.WithCancel(context.Background())
	s.mu.Lock()
	if prev, ok := s.held[name]; ok {
		prev() // re-locked by this process: one refresher is enough
	}
	s.held[name] = cancel
	s.mu.Unlock()
	go s.refresh(rctx, name)
	return nil
}

// refresh extends the lock every lockRefresh until ctx ends.
func (s *Storage) refresh(ctx context.Context, name string) {
	t := time.NewTicker(lockRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			s.db.ACMELock(wctx, name, s.owner, lockTTL) // a failure leaves the lock to expire: the next tick retries
			cancel()
		}
	}
}

// Unlock implements certmagic.Locker.
func (s *Storage) Unlock(ctx context.Context, name string) error {
	s.mu.Lock()
	if cancel, ok := s.held[name]; ok {
		cancel()
		delete(s.held, name)
	}
	s.mu.Unlock()
	return s.db.ACMEUnlock(ctx, name, s.owner)
}
