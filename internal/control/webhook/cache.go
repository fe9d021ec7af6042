package webhook

import (
	"sync"
	"time"
)

// maxCachedOrgs bounds the organizations whose subscriptions are cached;
// beyond it the expired entries are swept, and if none has expired the
// lookup is simply not cached.
const maxCachedOrgs = 10_000

// subCache keeps each organization's subscriptions, per event, for ttl,
// so that an event costs no store read while its organization's
// subscriptions are fresh. It is safe for concurrent use.
type subCache struct {
	ttl time.Duration
	now func() time.Time

	mu   sync.Mutex // guards the following fields
	orgs map[string]*orgSubs
	// gen counts invalidations (of any organization: one counter costs
	// at most a lookup more): a lookup begun before an invalidation is
	// not stored after it.
	gen uint64
}

// orgSubs is one organization's cached lookups.
type orgSubs struct {
	until   time.Time // when they expire
	gen     uint64    // the cache generation they were read in
	byEvent map[string][]Subscription
}

// get returns the cached subscriptions of orgID for event, and the
// generation a lookup made now must carry to put its answer.
func (c *subCache) get(orgID, event string) ([]Subscription, uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.orgs[orgID]
	if o == nil || !c.now().Before(o.until) {
		return nil, c.gen, false
	}
	subs, ok := o.byEvent[event]
	return subs, c.gen, ok
}

// put caches subs as the subscriptions of orgID for event, unless the
// cache was invalidated since the lookup that found them began (gen).
func (c *subCache) put(orgID, event string, gen uint64, subs []Subscription) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	now := c.now()
	o := c.orgs[orgID]
	if o == nil || !now.Before(o.until) || o.gen != gen {
		if o == nil && len(c.orgs) >= maxCachedOrgs {
			for id, v := range c.orgs {
				if !now.Before(v.until) {
					delete(c.orgs, id)
				}
			}
			if len(c.orgs) >= maxCachedOrgs {
				return
			}
		}
		o = &orgSubs{until: now.Add(c.ttl), gen: gen, byEvent: make(map[string][]Subscription)}
		c.orgs[orgID] = o
	}
	o.byEvent[event] = subs
}

// invalidate forgets orgID's subscriptions and makes lookups in flight
// not cache what they find.
func (c *subCache) invalidate(orgID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.orgs, orgID)
	c.gen++
}
