// Package passhash owns password hashes: making an argon2id hash in the
// PHC string format and verifying a password against an argon2id or
// bcrypt hash. It imports only the standard library and
// golang.org/x/crypto, because aperio-client links it to print hashes.
package passhash

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aperio-dev/aperio/internal/b64"

	"golang.org/x/crypto/argon2"
	"golang.org/x/crypto/bcrypt"
)

// The parameters Hash uses: argon2id with 19 MiB of memory, two passes
// and one lane, a 16-byte salt and a 32-byte key (the OWASP minimum for
// argon2id). A verification costs about 20-40 ms of one core and 19 MiB
// of memory; callers cache successful verifications.
const (
	DefaultMemoryKiB = 19 * 1024
	DefaultTime      = 2
	DefaultThreads   = 1
	saltBytes        = 16
	keyBytes         = 32
)

// Bounds on the hashes Verify and Check accept. A hash comes from a config
// file, which may have been written by someone other than the operator (a
// client announces its services' settings), so its cost is bounded: one
// verification never takes more than 256 MiB or a few seconds.
const (
	// MaxHashLen bounds an encoded hash.
	MaxHashLen = 512
	// MaxPasswordLen bounds a password: longer ones never match.
	MaxPasswordLen = 1024
	// MaxMemoryKiB bounds argon2id's m parameter (256 MiB).
	MaxMemoryKiB = 256 * 1024
	// MaxTime bounds argon2id's t parameter.
	MaxTime = 16
	// MaxThreads bounds argon2id's p parameter.
	MaxThreads = 16
	// MaxBcryptCost bounds a bcrypt hash's cost (14 is about a second).
	MaxBcryptCost = 14
)

// Errors Verify and Check return. ErrMismatch is the only one a well-formed
// hash yields; every other error wraps ErrMalformed.
var (
	ErrMismatch  = errors.New("passhash: password does not match")
	ErrMalformed = errors.New("passhash: not an argon2id or bcrypt hash")
)

// malformed returns an error wrapping ErrMalformed with a reason. The
// reason never quotes the hash: a mistyped hash may be a plain password.
func malformed(reason string) error {
	return fmt.Errorf("%w: %s", ErrMalformed, reason)
}

// Hash returns an argon2id hash of password in the PHC string format,
// `$argon2id$v=19$m=19456,t=2,p=1$<salt>$<key>` (unpadded standard
// base64), with a fresh random salt. It fails only for a password longer
// than MaxPasswordLen bytes or an empty one.
func Hash(password string) (string, error) {
	if password == "" {
		return "", errors.New("passhash: empty password")
	}
	if len(password) > MaxPasswordLen {
		return "", fmt.Errorf("passhash: password longer than %d bytes", MaxPasswordLen)
	}
	salt := make([]byte, saltBytes)
	rand.Read(salt)
	p := argonParams{memory: DefaultMemoryKiB, time: DefaultTime, threads: DefaultThreads, salt: salt}
	p.key = argon2.IDKey([]byte(password), p.salt, p.time, p.memory, p.threads, keyBytes)
	return p.String(), nil
}

// Check reports whether encoded is a hash Verify accepts: an argon2id PHC
// string or a bcrypt hash ($2a$, $2b$, $2y$), within the bounds above. It
// does no hashing, so it suits validating a config. A plain-text password
// is refused with an error wrapping ErrMalformed.
func Check(encoded string) error {
	_, err := parse(encoded)
	return err
}

// Verify reports whether password matches encoded: nil when it does,
// ErrMismatch when it does not, an error wrapping ErrMalformed when
// encoded is not a hash Check accepts. It takes the hash's full cost (tens
// of milliseconds and, for argon2id, its memory) and compares in constant
// time. It is safe for concurrent use.
func Verify(encoded, password string) error {
	h, err := parse(encoded)
	if err != nil {
		return err
	}
	if len(password) > MaxPasswordLen {
		return ErrMismatch
	}
	if h.bcrypt {
		// bcrypt reads only the first 72 bytes; a longer password would
		// match any password sharing them, so it never matches.
		if len(password) > 72 {
			return ErrMismatch
		}
		if err := bcrypt.CompareHashAndPassword([]byte(encoded), []byte(password)); err != nil {
			if errors.Is(err, bcrypt.ErrMismatchedHashAndPassword) {
				return ErrMismatch
			}
			return malformed("bcrypt: " + err.Error())
		}
		return nil
	}
	a := h.argon
	key := argon2.IDKey([]byte(password), a.salt, a.time, a.memory, a.threads, uint32(len(a.key)))
	if subtle.ConstantTimeCompare(key, a.key) != 1 {
		return ErrMismatch
	}
	return nil
}

// parsed is a hash that passed parse.
type parsed struct {
	bcrypt bool
	argon  argonParams
}

// argonParams is an argon2id hash's parameters, salt and key.
type argonParams struct {
	memory  uint32 // KiB
	time    uint32
	threads uint8
	salt    []byte
	key     []byte
}

// String returns p in the PHC string format.
func (p argonParams) String() string {
	enc := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s",
		argon2.Version, p.memory, p.time, p.threads, enc.EncodeToString(p.salt), enc.EncodeToString(p.key))
}

func parse(encoded string) (parsed, error) {
	if len(encoded) > MaxHashLen {
		return parsed{}, malformed(fmt.Sprintf("longer than %d bytes", MaxHashLen))
	}
	switch {
	case strings.HasPrefix(encoded, "$argon2id$"):
		a, err := parseArgon(encoded)
		return parsed{argon: a}, err
	case strings.HasPrefix(encoded, "$2a$"), strings.HasPrefix(encoded, "$2b$"), strings.HasPrefix(encoded, "$2y$"):
		cost, err := bcrypt.Cost([]byte(encoded))
		if err != nil {
			return parsed{}, malformed("bcrypt: " + err.Error())
		}
		if cost > MaxBcryptCost {
			return parsed{}, malformed(fmt.Sprintf("bcrypt cost %d above %d", cost, MaxBcryptCost))
		}
		if len(encoded) != 60 {
			return parsed{}, malformed("bcrypt hash is not 60 bytes")
		}
		return parsed{bcrypt: true}, nil
	case strings.HasPrefix(encoded, "$argon2"):
		return parsed{}, malformed("only the argon2id variant is accepted")
	}
	return parsed{}, malformed("no $argon2id$ or $2a$/$2b$/$2y$ prefix")
}

// parseArgon parses `$argon2id$v=19$m=M,t=T,p=P$salt$key`.
func parseArgon(encoded string) (argonParams, error) {
	var a argonParams
	parts := strings.Split(encoded, "$")
	// "", "argon2id", "v=19", "m=..,t=..,p=..", salt, key
	if len(parts) != 6 {
		return a, malformed("argon2id: want $argon2id$v=19$m=..,t=..,p=..$salt$key")
	}
	if parts[2] != "v=19" {
		return a, malformed("argon2id: only version 19 is accepted")
	}
	params := strings.Split(parts[3], ",")
	if len(params) != 3 {
		return a, malformed("argon2id: want parameters m=..,t=..,p=..")
	}
	var m, t, p uint64
	for i, want := range []struct {
		name string
		dst  *uint64
		max  uint64
	}{{"m", &m, MaxMemoryKiB}, {"t", &t, MaxTime}, {"p", &p, MaxThreads}} {
		v, ok := strings.CutPrefix(params[i], want.name+"=")
		if !ok {
			return a, malformed("argon2id: want parameters m=..,t=..,p=.. in that order")
		}
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n == 0 {
			return a, malformed("argon2id: parameter " + want.name + " is not a positive integer")
		}
		if n > want.max {
			return a, malformed(fmt.Sprintf("argon2id: parameter %s=%d above %d", want.name, n, want.max))
		}
		*want.dst = n
	}
	if m < 8*p {
		return a, malformed("argon2id: m below 8 KiB per lane")
	}
	salt, err := b64.DecodeRawStd(parts[4])
	if err != nil || len(salt) < 8 || len(salt) > 64 {
		return a, malformed("argon2id: salt is not 8 to 64 bytes of unpadded base64")
	}
	key, err := b64.DecodeRawStd(parts[5])
	if err != nil || len(key) < 16 || len(key) > 64 {
		return a, malformed("argon2id: key is not 16 to 64 bytes of unpadded base64")
	}
	return argonParams{memory: uint32(m), time: uint32(t), threads: uint8(p), salt: salt, key: key}, nil
}
