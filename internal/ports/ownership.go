package ports

import (
	"context"
	"fmt"
	"slices"

	"github.com/aperio-dev/aperio/internal/portspec"
)

// Ownership is which organization owns which public ports, as admission
// enforces it (SetOwnership). A port's number is owned for TCP and UDP
// alike.
type Ownership struct {
	// Ranges maps each organization that owns ports to its ranges. No two
	// organizations' ranges overlap; the store guarantees it.
	Ranges map[string][]portspec.Range
	// DefaultOrg is the ID of the default organization, the one the
	// master token's clients belong to. While it owns no port it may open
	// any port no other organization owns, first come, as before ports
	// had owners.
	DefaultOrg string
}

// ownedRange is one range and its organization.
type ownedRange struct {
	portspec.Range
	org string
}

// ownership is Ownership indexed for admission.
type ownership struct {
	ranges     []ownedRange   // sorted by Lo, never overlapping
	counts     map[string]int // ranges per organization
	defaultOrg string
}

func newOwnership(o Ownership) *ownership {
	idx := &ownership{counts: map[string]int{}, defaultOrg: o.DefaultOrg}
	for org, rs := range o.Ranges {
		for _, r := range rs {
			if r.Size() > 0 {
				idx.ranges = append(idx.ranges, ownedRange{r, org})
				idx.counts[org]++
			}
		}
	}
	slices.SortFunc(idx.ranges, func(a, b ownedRange) int { return a.Lo - b.Lo })
	return idx
}

// owner returns the organization that owns port n, or "".
func (o *ownership) owner(n int) string {
	if o == nil {
		return ""
	}
	i, _ := slices.BinarySearchFunc(o.ranges, n, func(r ownedRange, n int) int {
		switch {
		case r.Hi < n:
			return -1
		case r.Lo > n:
			return 1
		}
		return 0
	})
	if i < len(o.ranges) && o.ranges[i].Contains(n) {
		return o.ranges[i].org
	}
	return ""
}

// refusal returns why a client of organization org may not open port n,
// or "" when it may: an organization with ports opens only its own; the
// default organization without ports opens any port no other
// organization owns; any other organization without ports opens none. A
// port another organization owns is refused even while nobody holds it.
// A nil ownership (never set) refuses nothing.
func (o *ownership) refusal(org string, n int) string {
	if o == nil {
		return ""
	}
	owner := o.owner(n)
	switch {
	case owner == org:
		return ""
	case owner != "":
		return fmt.Sprintf("port %d is owned by another organization", n)
	case o.counts[org] > 0:
		return fmt.Sprintf("port %d is not among the ports of this client's organization", n)
	case org == o.defaultOrg:
		return ""
	}
	return fmt.Sprintf("port %d: this client's organization owns no ports (the master token assigns them with PUT /aperio/api/orgs/{id}/ports)", n)
}

// SetOwnership replaces the port ownership admission checks. Ports open
// now whose organization may no longer hold them are closed at once, with
// their connections (visitors must never reach another organization's
// backend on a port it owns); their sessions are refused them with the
// reason on their next announcement. Until it is first called ownership
// is not enforced. It is safe for concurrent use.
func (m *Manager) SetOwnership(ctx context.Context, o Ownership) {
	idx := newOwnership(o)
	var closing []*port
	var events []event
	m.mu.Lock()
	m.owners.Store(idx)
	for key, p := range m.ports {
		why := idx.refusal(p.org, key.num)
		if why == "" {
			continue
		}
		delete(m.ports, key)
		closing = append(closing, p)
		for _, mine := range m.sessions {
			for name, h := range mine {
				if h.key == key {
					delete(mine, name)
					events = append(events, event{AuditEntry{OrgID: p.org, Action: ActionClosed, Detail: p.describe(name, "closed: "+why)}})
				}
			}
		}
	}
	m.mu.Unlock()
	for _, p := range closing {
		p.close()
	}
	m.emit(ctx, events)
}
