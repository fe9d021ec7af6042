package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// The audit hash chain (docs/audit-and-explain.md).
//
// Entry n (Seq n, from 1, without gaps) carries PrevHash, the Hash of entry
// n-1 (32 zero bytes for entry 1), and
//
//	Hash = SHA-256(PrevHash || field("aperio-audit-v1") || field(seq) ||
//	               field(at) || field(org_id) || field(event) ||
//	               field(actor) || field(hostname) || field(detail))
//
// where field(x) is the length of x in bytes as an 8-byte big-endian
// unsigned integer followed by the bytes of x, seq is the decimal form of
// Seq, and at is At in UTC to the microsecond in the fixed-width form
// "2006-01-02T15:04:05.000000Z" (both engines store times to the
// microsecond, so the bytes hashed at append are the bytes read back). The
// length prefixes make the encoding unambiguous: no two different entries
// encode to the same bytes. The database row ID is not hashed; Seq is the
// entry's place in the chain.

// auditHashDomain opens every hashed encoding, so that a future change of
// encoding cannot collide with this one.
const auditHashDomain = "aperio-audit-v1"

// auditTime is the fixed-precision form of At inside the hash.
const auditTime = "2006-01-02T15:04:05.000000Z"

// auditGenesis is the PrevHash of the first entry.
var auditGenesis = make([]byte, sha256.Size)

// AuditHash returns the hash of e chained after prev (the previous entry's
// Hash, or 32 zero bytes for Seq 1), as defined above. It reads e.Seq and
// the content fields and ignores e.ID, e.PrevHash and e.Hash.
func AuditHash(prev []byte, e AuditEntry) []byte {
	h := sha256.New()
	h.Write(prev)
	writeField(h, []byte(auditHashDomain))
	writeField(h, strconv.AppendInt(nil, e.Seq, 10))
	writeField(h, e.At.UTC().AppendFormat(nil, auditTime))
	for _, s := range []string{e.OrgID, e.Event, string(e.Actor), e.Hostname, e.Detail} {
		writeField(h, []byte(s))
	}
	return h.Sum(nil)
}

func writeField(h hash.Hash, b []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(b)))
	h.Write(n[:])
	h.Write(b)
}

// chainAfter sets e's Seq, PrevHash and Hash to follow the chain head
// (headSeq, headHash). appendAudit and backfillAudit call it with the head
// locked.
func chainAfter(e AuditEntry, headSeq int64, headHash []byte) AuditEntry {
	e.Seq = headSeq + 1
	e.PrevHash = bytes.Clone(headHash)
	e.Hash = AuditHash(e.PrevHash, e)
	return e
}

// AuditChainError says where the audit chain breaks: the first entry, in
// chain order, that does not verify. VerifyAudit returns it.
type AuditChainError struct {
	// Entry is the first broken entry as stored. For a chain cut at the
	// tail (entries removed after the last one stored), it is the last
	// entry left, or the zero entry when none is left.
	Entry AuditEntry
	// Reason says what is wrong, in a few words.
	Reason string
}

func (e *AuditChainError) Error() string {
	return fmt.Sprintf("store: audit chain broken at entry id %d seq %d (at %s, event %q): %s",
		e.Entry.ID, e.Entry.Seq, e.Entry.At.UTC().Format(auditTime), e.Entry.Event, e.Reason)
}

// ErrAuditChainBroken is wrapped by every *AuditChainError, for callers that
// only branch on whether the chain holds.
var ErrAuditChainBroken = errors.New("store: audit chain broken")

// Unwrap lets errors.Is(err, ErrAuditChainBroken) match.
func (e *AuditChainError) Unwrap() error { return ErrAuditChainBroken }

// AuditClockSkew is how far an entry's At may lie before the At of the
// entry chained before it, for VerifyAudit. The store stamps At before it
// takes the chain head, and several servers append to one PostgreSQL
// database, so times along the chain may step back by one server's wait
// for the head plus the clock difference between servers; a step back
// larger than this reads as a backdated entry. Keep server clocks
// synchronized (NTP) well within it.
const AuditClockSkew = time.Minute

// auditChain is what readAuditChain reads for VerifyAudit, from one snapshot of
// the database.
type auditChain struct {
	// headSeq and headHash are the chain head row.
	headSeq  int64
	headHash []byte
	// unchained is the oldest entry without chain columns, if any.
	unchained *AuditEntry
}

// VerifyAudit walks the whole audit log in chain order, from one snapshot
// of the database, and checks every link: Seq runs 1, 2, 3, … without gaps,
// each PrevHash is the Hash of the entry before it, each Hash matches the
// entry's content, no At lies more than AuditClockSkew before the At of
// the entry before it, no entry lacks its chain columns, and the last entry is
// the chain head that appends recorded. It returns the number of entries
// when the chain holds; otherwise an *AuditChainError naming the first
// broken entry (errors.Is ErrAuditChainBroken). Other errors mean the log
// could not be read. It reads every entry once, holding one in memory at a
// time.
//
// What it cannot see: a rewrite of the whole chain from some entry on,
// head included, by someone with write access to the database (the hashes
// are unkeyed). Copy the head hash somewhere else to anchor it.
func (db *DB) VerifyAudit(ctx context.Context) (int64, error) {
	if db.closed.Load() {
		return 0, errClosed
	}
	var (
		n        int64
		prev     AuditEntry
		prevHash = auditGenesis
		broken   *AuditChainError
	)
	head, err := db.b.readAuditChain(ctx, func(e AuditEntry) bool {
		switch {
		case e.Seq != n+1:
			missing := strconv.FormatInt(n+1, 10)
			if e.Seq > n+2 {
				missing += "-" + strconv.FormatInt(e.Seq-1, 10)
			}
			broken = &AuditChainError{Entry: e, Reason: fmt.Sprintf("seq %d follows seq %d: entry seq %s missing", e.Seq, n, missing)}
		case !bytes.Equal(e.PrevHash, prevHash):
			broken = &AuditChainError{Entry: e, Reason: fmt.Sprintf("prev_hash %s is not the hash of entry seq %d (%s): the entry before it was changed or replaced",
				short(e.PrevHash), n, short(prevHash))}
		case !bytes.Equal(e.Hash, AuditHash(e.PrevHash, e)):
			broken = &AuditChainError{Entry: e, Reason: "hash does not match the entry's content: the entry was changed"}
		case n > 0 && e.At.Before(prev.At.Add(-AuditClockSkew)):
			broken = &AuditChainError{Entry: e, Reason: fmt.Sprintf("at %s is more than %s before entry seq %d (at %s): the entry was backdated",
				e.At.UTC().Format(auditTime), AuditClockSkew, n, prev.At.UTC().Format(auditTime))}
		default:
			n, prev, prevHash = e.Seq, e, e.Hash
			return true
		}
		return false
	})
	if err != nil {
		return 0, db.fail("verify audit", err)
	}
	if broken != nil {
		return n, broken
	}
	if head.unchained != nil {
		return n, &AuditChainError{Entry: *head.unchained, Reason: "entry has no chain columns: it was inserted around the store"}
	}
	if head.headSeq != n || !bytes.Equal(head.headHash, prevHash) {
		return n, &AuditChainError{Entry: prev, Reason: fmt.Sprintf("chain ends at seq %d but its head records seq %d (%s): entries were removed from the end or the head was changed",
			n, head.headSeq, short(head.headHash))}
	}
	return n, nil
}

// short renders the start of a hash for messages.
func short(h []byte) string {
	if len(h) > 8 {
		h = h[:8]
	}
	return hex.EncodeToString(h) + "…"
}

// MaxAuditDetailBytes bounds an entry's Detail: AppendAudit cuts a longer
// one (at a rune boundary) and says how much it cut, so that no caller can
// make one entry of the permanent log arbitrarily large.
const MaxAuditDetailBytes = 8 << 10

// cleanAudit returns e with its free-text fields made safe to store and
// show: invalid UTF-8 replaced, control and bidirectional formatting
// characters escaped as \xNN or \uNNNN (so that text chosen by a client
// cannot forge lines or reorder what a terminal shows), and Detail cut to
// MaxAuditDetailBytes.
func cleanAudit(e AuditEntry) AuditEntry {
	e.Actor = Actor(auditText(string(e.Actor)))
	e.Hostname = auditText(e.Hostname)
	e.Detail = auditText(e.Detail)
	if len(e.Detail) > MaxAuditDetailBytes {
		cut := MaxAuditDetailBytes
		for cut > 0 && !utf8.RuneStart(e.Detail[cut]) {
			cut--
		}
		e.Detail = e.Detail[:cut] + fmt.Sprintf("… (%d bytes cut)", len(e.Detail)-cut)
	}
	return e
}

// auditText escapes what cleanAudit escapes. Text with nothing to escape is
// returned as is, without allocating.
func auditText(s string) string {
	if utf8.ValidString(s) && strings.IndexFunc(s, auditEscaped) < 0 {
		return s
	}
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		switch {
		case r < 0x100 && auditEscaped(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case auditEscaped(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// auditEscaped reports whether r is a control character (C0, DEL, C1) or
// a Unicode formatting character (bidirectional overrides, zero-width
// joiners and the like).
func auditEscaped(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
}
