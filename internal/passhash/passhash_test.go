package passhash

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

func TestHashVerify(t *testing.T) {
	h, err := Hash("correct horse")
	if err != nil {
		t.Fatalf("Hash: %v", err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Fatalf("Hash = %q, want the PHC argon2id form with the default parameters", h)
	}
	if err := Check(h); err != nil {
		t.Fatalf("Check(Hash()) = %v, want nil", err)
	}
	if err := Verify(h, "correct horse"); err != nil {
		t.Errorf("Verify(right password) = %v, want nil", err)
	}
	for _, wrong := range []string{"", "correct hors", "correct horse ", "Correct horse"} {
		if err := Verify(h, wrong); !errors.Is(err, ErrMismatch) {
			t.Errorf("Verify(%q) = %v, want ErrMismatch", wrong, err)
		}
	}
	h2, err := Hash("correct horse")
	if err != nil {
		t.Fatal(err)
	}
	if h2 == h {
		t.Errorf("two hashes of one password are equal (%q): the salt is not random", h)
	}
}

func TestHashRefuses(t *testing.T) {
	for _, pw := range []string{"", strings.Repeat("x", MaxPasswordLen+1)} {
		if h, err := Hash(pw); err == nil {
			t.Errorf("Hash(%d bytes) = %q, nil; want an error", len(pw), h)
		}
	}
}

func TestVerifyBcrypt(t *testing.T) {
	b, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	h := string(b)
	if err := Verify(h, "s3cret"); err != nil {
		t.Errorf("Verify(bcrypt, right) = %v, want nil", err)
	}
	if err := Verify(h, "s3cre"); !errors.Is(err, ErrMismatch) {
		t.Errorf("Verify(bcrypt, wrong) = %v, want ErrMismatch", err)
	}
	// A password sharing the first 72 bytes of the right one must not match.
	long := strings.Repeat("a", 72)
	b, err = bcrypt.GenerateFromPassword([]byte(long), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(string(b), long+"tail"); !errors.Is(err, ErrMismatch) {
		t.Errorf("Verify(bcrypt, 72-byte prefix + tail) = %v, want ErrMismatch", err)
	}
	y := "$2y$" + h[4:]
	if err := Verify(y, "s3cret"); err != nil {
		t.Errorf("Verify($2y$ spelling) = %v, want nil", err)
	}
}

func TestCheckHostile(t *testing.T) {
	valid := "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHRzYWx0c2FsdA$" + strings.Repeat("A", 43)
	if err := Check(valid); err != nil {
		t.Fatalf("Check(valid) = %v", err)
	}
	bc, err := bcrypt.GenerateFromPassword([]byte("x"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	costly := "$2a$15$" + string(bc[7:]) // a cost above MaxBcryptCost, without paying it
	tests := []struct {
		name, hash string
	}{
		{"plain text", "hunter2"},
		{"empty", ""},
		{"argon2i", "$argon2i$v=19$m=19456,t=2,p=1$c2FsdHNhbHRzYWx0c2FsdA$" + strings.Repeat("A", 43)},
		{"argon2d", "$argon2d$v=19$m=19456,t=2,p=1$c2FsdHNhbHRzYWx0c2FsdA$" + strings.Repeat("A", 43)},
		{"old version", strings.Replace(valid, "v=19", "v=16", 1)},
		{"memory bomb", strings.Replace(valid, "m=19456", "m=4194304", 1)},
		{"time bomb", strings.Replace(valid, "t=2", "t=1000", 1)},
		{"threads", strings.Replace(valid, "p=1", "p=255", 1)},
		{"zero time", strings.Replace(valid, "t=2", "t=0", 1)},
		{"negative", strings.Replace(valid, "m=19456", "m=-1", 1)},
		{"overflow", strings.Replace(valid, "m=19456", "m=99999999999999999999", 1)},
		{"order", strings.Replace(valid, "m=19456,t=2", "t=2,m=19456", 1)},
		{"memory below lanes", strings.Replace(strings.Replace(valid, "m=19456", "m=8", 1), "p=1", "p=2", 1)},
		{"missing key", "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHRzYWx0c2FsdA"},
		{"extra field", valid + "$x"},
		{"short salt", "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$" + strings.Repeat("A", 43)},
		{"padded salt", "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHRzYWx0c2FsdA==$" + strings.Repeat("A", 43)},
		{"bad base64 key", "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHRzYWx0c2FsdA$!!!!"},
		{"short key", "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHRzYWx0c2FsdA$AAAA"},
		{"too long", valid + strings.Repeat("A", MaxHashLen)},
		{"bcrypt cost bomb", costly},
		{"bcrypt truncated", "$2b$10$abc"},
		{"bcrypt unknown major", "$3a$10$" + strings.Repeat("a", 53)},
		{"nul", "$argon2id$v=19\x00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(tt.hash)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("Check = %v, want ErrMalformed", err)
			}
			if len(tt.hash) > 6 && strings.Contains(err.Error(), tt.hash) {
				t.Errorf("Check error %q quotes the hash, which may be a plain password", err)
			}
			if err := Verify(tt.hash, "x"); !errors.Is(err, ErrMalformed) {
				t.Errorf("Verify = %v, want ErrMalformed", err)
			}
		})
	}
}

func TestVerifyLongPassword(t *testing.T) {
	h, err := Hash("p")
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(h, strings.Repeat("p", MaxPasswordLen+1)); !errors.Is(err, ErrMismatch) {
		t.Errorf("Verify(over-long password) = %v, want ErrMismatch", err)
	}
}

func FuzzCheck(f *testing.F) {
	f.Add("$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHRzYWx0c2FsdA$" + strings.Repeat("A", 43))
	f.Add("$2b$10$" + strings.Repeat("a", 53))
	f.Add("hunter2")
	f.Fuzz(func(t *testing.T, s string) {
		err := Check(s)
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("Check(%q) = %v, not ErrMalformed", s, err)
		}
	})
}
