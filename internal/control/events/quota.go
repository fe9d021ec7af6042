package events

import (
	"fmt"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/store"
)

// Quota is what a quota_exceeded event says: which quota, of whom, and
// how far it went.
type Quota struct {
	// OrgID is the organization; TokenID the token, "" for an
	// organization's quota.
	OrgID, TokenID string
	// Hostname is the bind hostname of the refused request, if any.
	Hostname string
	// Limit names the setting: "daily_max_bytes" or "monthly_max_bytes".
	Limit string
	// UsedBytes is the count that reached MaxBytes.
	UsedBytes, MaxBytes int64
	// At is when the quota was found exceeded; zero means now.
	At time.Time
}

// QuotaExceeded returns the quota_exceeded event of q, for Emit or Offer:
// the usage accounting calls it once per quota and period.
func QuotaExceeded(q Quota) Event {
	who := "organization " + q.OrgID
	actor := store.ServerActor
	if q.TokenID != "" {
		who = "token " + q.TokenID
		actor = store.TokenActor(q.TokenID)
	}
	return Event{
		Kind: apitype.EventQuotaExceeded, At: q.At, OrgID: q.OrgID, Actor: actor, Hostname: q.Hostname,
		Detail: fmt.Sprintf("%s used %d of %s %d bytes", who, q.UsedBytes, q.Limit, q.MaxBytes),
		Fields: map[string]any{"token_id": q.TokenID, "limit": q.Limit, "used_bytes": q.UsedBytes, "max_bytes": q.MaxBytes},
	}
}
