package access

import (
	"encoding/base64"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aperio-dev/aperio/internal/b64"

	"golang.org/x/crypto/bcrypt"

	"github.com/aperio-dev/aperio/internal/passhash"
)

var (
	hashOnce          sync.Once
	argonHash, bcHash string
)

// testHashes returns an argon2id hash of "argon-pw" and a bcrypt hash of
// "bcrypt-pw", made once per test binary.
func testHashes(tb testing.TB) (string, string) {
	tb.Helper()
	hashOnce.Do(func() {
		var err error
		if argonHash, err = passhash.Hash("argon-pw"); err != nil {
			panic(err)
		}
		b, err := bcrypt.GenerateFromPassword([]byte("bcrypt-pw"), bcrypt.MinCost)
		if err != nil {
			panic(err)
		}
		bcHash = string(b)
	})
	return argonHash, bcHash
}

func basicAuth(user, password string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
}

// countingBasic returns a basic method for ann (argon2id) and bob
// (bcrypt) that counts its hash verifications.
func countingBasic(tb testing.TB, clk *fakeClock) (*Basic, func() int) {
	tb.Helper()
	a, b := testHashes(tb)
	m, err := NewBasic(BasicConfig{Realm: "staff", Users: map[string]string{"ann": a, "bob": b}, Now: clk.Now})
	if err != nil {
		tb.Fatal(err)
	}
	var mu sync.Mutex
	n := 0
	m.verify = func(hash, password string) error {
		mu.Lock()
		n++
		mu.Unlock()
		return passhash.Verify(hash, password)
	}
	return m, func() int { mu.Lock(); defer mu.Unlock(); return n }
}

func TestBasic(t *testing.T) {
	m, _ := countingBasic(t, newFakeClock())
	challenge := `Basic realm="staff", charset="UTF-8"`
	tests := []struct {
		name   string
		auth   []string
		want   Outcome
		user   string
		reason string
	}{
		{"argon2id", []string{basicAuth("ann", "argon-pw")}, Admit, "ann", `user "ann"`},
		{"bcrypt", []string{basicAuth("bob", "bcrypt-pw")}, Admit, "bob", `user "bob"`},
		{"password with colon part", []string{basicAuth("ann", "argon-pw:x")}, Invalid, "", `wrong password for user "ann"`},
		{"wrong password", []string{basicAuth("ann", "bcrypt-pw")}, Invalid, "", `wrong password for user "ann"`},
		{"unknown user", []string{basicAuth("eve", "argon-pw")}, Invalid, "", `unknown user "eve"`},
		{"empty password", []string{basicAuth("ann", "")}, Invalid, "", `wrong password for user "ann"`},
		{"no header", nil, Absent, "", "no basic credentials"},
		{"bearer scheme", []string{"Bearer abc"}, Absent, "", "no basic credentials"},
		{"two headers", []string{basicAuth("ann", "argon-pw"), basicAuth("bob", "bcrypt-pw")}, Absent, "", "no basic credentials"},
		{"not base64", []string{"Basic !!!"}, Invalid, "", "basic credentials are not base64"},
		{"no colon", []string{"Basic " + base64.StdEncoding.EncodeToString([]byte("ann"))}, Invalid, "", "basic credentials without ':'"},
		{"huge", []string{"Basic " + strings.Repeat("A", 5000)}, Invalid, "", "basic credentials longer than 4096 bytes"},
		{"hostile user name is quoted", []string{basicAuth("e\nve", "x")}, Invalid, "", `unknown user "e\nve"`},
		{"trailing bits set", []string{"Basic " + b64.RespellingsForTest(strings.TrimPrefix(basicAuth("ann", "argon-pwx"), "Basic "))[2]}, Invalid, "", "basic credentials are not base64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRequest(t, "/")
			for _, a := range tt.auth {
				r.Header.Add("Authorization", a)
			}
			got := m.Check(r, visitor("/"))
			if got.Outcome != tt.want || got.User != tt.user || got.Reason != tt.reason {
				t.Errorf("Check = %v %q %q, want %v %q %q", got.Outcome, got.User, got.Reason, tt.want, tt.user, tt.reason)
			}
			if tt.want != Admit && got.Challenge != challenge {
				t.Errorf("Challenge = %q, want %q", got.Challenge, challenge)
			}
		})
	}
}

func TestBasicCache(t *testing.T) {
	clk := newFakeClock()
	m, verified := countingBasic(t, clk)
	check := func(user, pw string) Outcome {
		return m.Check(newRequest(t, "/", "Authorization", basicAuth(user, pw)), visitor("/")).Outcome
	}
	if got := check("ann", "argon-pw"); got != Admit {
		t.Fatalf("first check = %v, want admit", got)
	}
	if got := check("ann", "argon-pw"); got != Admit || verified() != 1 {
		t.Fatalf("second check = %v after %d verifications, want admit from the cache (1)", got, verified())
	}
	// Failures are never cached: each costs a verification.
	for range 2 {
		if got := check("ann", "nope"); got != Invalid {
			t.Fatalf("wrong password = %v", got)
		}
	}
	if verified() != 3 {
		t.Errorf("verifications after two failures = %d, want 3", verified())
	}
	// An unknown user costs a verification too, so timing does not tell.
	check("eve", "argon-pw")
	if verified() != 4 {
		t.Errorf("verifications after an unknown user = %d, want 4", verified())
	}
	clk.Advance(DefaultBasicCacheTTL)
	if got := check("ann", "argon-pw"); got != Admit || verified() != 5 {
		t.Errorf("check after the TTL = %v with %d verifications, want admit after a fresh verification (5)", got, verified())
	}
}

func TestBasicCacheKeyedByHash(t *testing.T) {
	a, b := testHashes(t)
	m, err := NewBasic(BasicConfig{Users: map[string]string{"ann": a}})
	if err != nil {
		t.Fatal(err)
	}
	if k1, k2 := m.key("ann", "pw", a), m.key("ann", "pw", b); k1 == k2 {
		t.Error("cache key does not change with the hash")
	}
	if k1, k2 := m.key("an", "npw", a), m.key("ann", "pw", a); k1 == k2 {
		t.Error("cache keys of (an, npw) and (ann, pw) collide")
	}
}

func TestBasicWaitsForSlot(t *testing.T) {
	a, _ := testHashes(t)
	m, err := NewBasic(BasicConfig{Users: map[string]string{"ann": a}, MaxVerifying: 1})
	if err != nil {
		t.Fatal(err)
	}
	m.slots <- struct{}{} // the only slot is busy
	r := canceled(newRequest(t, "/", "Authorization", basicAuth("ann", "argon-pw")))
	if got := m.Check(r, visitor("/")); got.Outcome != Unavailable {
		t.Errorf("Check with every slot busy and the request gone = %v, want unavailable", got.Outcome)
	}
	<-m.slots
	if got := m.Check(newRequest(t, "/", "Authorization", basicAuth("ann", "argon-pw")), visitor("/")); got.Outcome != Admit {
		t.Errorf("Check with a free slot = %v (%s), want admit", got.Outcome, got.Reason)
	}
}

func TestNewBasicRefuses(t *testing.T) {
	a, _ := testHashes(t)
	tests := []struct {
		name string
		cfg  BasicConfig
		want []string
	}{
		{"plain password names the user", BasicConfig{Users: map[string]string{"ann": a, "carl": "hunter2"}}, []string{`basic user "carl"`, "never plain text"}},
		{"no users", BasicConfig{}, []string{"at least one user"}},
		{"colon in name", BasicConfig{Users: map[string]string{"a:b": a}}, []string{`basic user "a:b"`}},
		{"control in name", BasicConfig{Users: map[string]string{"a\x00": a}}, []string{`basic user "a\x00"`}},
		{"quote in realm", BasicConfig{Realm: `a"b`, Users: map[string]string{"ann": a}}, []string{"realm"}},
		{"negative cache", BasicConfig{CacheSize: -1, Users: map[string]string{"ann": a}}, []string{"negative"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewBasic(tt.cfg)
			if err == nil {
				t.Fatal("NewBasic = nil error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %q quotes the plain password", err)
			}
			if !errors.Is(err, passhash.ErrMalformed) && tt.name == "plain password names the user" {
				t.Errorf("error %v does not wrap passhash.ErrMalformed", err)
			}
		})
	}
}

func TestBasicCachedCheckDoesNotVerify(t *testing.T) {
	// The cached path must stay cheap: no hash verification at all.
	clk := newFakeClock()
	m, verified := countingBasic(t, clk)
	r := newRequest(t, "/", "Authorization", basicAuth("bob", "bcrypt-pw"))
	m.Check(r, visitor("/"))
	for range 100 {
		if m.Check(r, visitor("/")).Outcome != Admit {
			t.Fatal("cached check refused")
		}
		clk.Advance(time.Second)
	}
	if verified() != 1 {
		t.Errorf("verifications = %d over 101 checks within the TTL, want 1", verified())
	}
}

func TestBasicSlotWaitIsBounded(t *testing.T) {
	a, _ := testHashes(t)
	synctest.Test(t, func(t *testing.T) {
		m, err := NewBasic(BasicConfig{Users: map[string]string{"ann": a}, MaxVerifying: 1})
		if err != nil {
			t.Fatal(err)
		}
		m.slots <- struct{}{} // the only slot stays busy
		start := time.Now()
		got := m.Check(newRequest(t, "/", "Authorization", basicAuth("ann", "argon-pw")), visitor("/"))
		if got.Outcome != Unavailable {
			t.Errorf("Check with the slot busy = %v, want unavailable", got.Outcome)
		}
		if waited := time.Since(start); waited != maxVerifyWait {
			t.Errorf("waited %s for a slot, want %s", waited, maxVerifyWait)
		}
	})
}
