package autoscale

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/store"
)

// OperatorDeclaration is a scaling block an operator declares through the
// admin API (POST /scaling), so that a bind can be cold started before any
// client has ever connected for it.
type OperatorDeclaration struct {
	// OrgID, Hostname and Path name the bind, normalized exactly as the
	// router names its pools (Path "" means none). The caller has checked
	// that the organization may bind the hostname.
	OrgID, Hostname, Path string
	// Armer is the admin API actor declaring it: "key:ID" for an admin
	// key, "oidc:USER" for a login, or "master" (see OperatorArmer). It is
	// added to the record's ArmedBy, and counts against
	// Config.MaxRecordsPerToken like a client token, the master token
	// excepted.
	Armer string
	// Block is the declared block, before defaults.
	Block Declaration
}

// OperatorArmer reports whether armer, an entry of a record's ArmedBy, is
// an admin API caller (an admin key, "key:ID", or a login, "oidc:USER")
// rather than a client token's ID or "master". Such an armer has no token:
// it may arm the record as far as its organization may bind the hostname,
// and it restricts no visitor (as the master token does not).
func OperatorArmer(armer string) bool {
	return strings.HasPrefix(armer, string(store.AdminKeyActor(""))) || strings.HasPrefix(armer, string(store.OIDCActor("")))
}

// Arm creates the record of a's bind, or updates the one that exists, with
// a's block, and re-arms it (breaker and failure count cleared, backoff
// forgotten), exactly as a client's first declaration of the block would
// store it: the same defaults and rules (an invalid block, or a URL
// Config.Policy refuses, is a *DeclarationError, errors.Is ErrInvalid),
// the same caps (ErrRecordLimit), and ErrBindTaken for a bind another
// organization holds a record for. created reports that no record of the
// bind existed. The view is the record as List shows it.
//
// A live client declaring another block for the bind stores its own at its
// next announcement, as a newer session would: the operator's block stands
// until a client says otherwise. Arm is safe for concurrent use;
// declarations of one bind, a client's or an operator's, take turns.
func (c *Controller) Arm(ctx context.Context, a OperatorDeclaration) (v View, created bool, err error) {
	d, problems := c.checkBlock(a.Hostname, a.Block)
	if len(problems) > 0 {
		return View{}, false, &DeclarationError{Hostname: a.Hostname, Problems: problems}
	}
	if a.OrgID == "" || a.Armer == "" {
		return View{}, false, errors.New("autoscale: arm: empty organization or armer")
	}
	k := bindKey{a.OrgID, a.Hostname, a.Path}
	var stored *Record
	b, res, err := c.takeTurn(ctx, k, a.Armer, func(b *bind) {
		if b.rec != nil {
			r := *b.rec
			stored = &r
		}
	})
	if err != nil {
		return View{}, false, fmt.Errorf("autoscale: arm %s%s: %w", a.Hostname, a.Path, err)
	}
	t := declareTurn{b: b, res: res}

	// The store, off the owner, as Declare does.
	if stored == nil {
		r, rerr := c.store.ScalingRecordByBind(ctx, a.OrgID, a.Hostname, a.Path)
		switch {
		case rerr == nil && r.OrgID == a.OrgID:
			stored = &r
		case rerr != nil && !errors.Is(rerr, store.ErrNotFound):
			err = rerr
		}
	}
	p, got := declarePlan{}, Record{}
	if err == nil {
		p = declarePlan{write: true, rearm: true, rec: Record{
			OrgID: a.OrgID, Hostname: a.Hostname, Path: a.Path,
			Scaling: d,
		}}
		got, _, err = c.store.DeclareScaling(ctx, p.rec, a.Armer, true)
	}
	c.endDeclare(t, p, got, err)
	if err != nil {
		return View{}, false, fmt.Errorf("autoscale: arm %s%s: %w", a.Hostname, a.Path, err)
	}
	created = stored == nil
	msg := "scaling record armed by an operator"
	if !created {
		msg = "scaling record re-armed by an operator"
	}
	c.log.Info(msg, logkey.OrgID, a.OrgID, logkey.Hostname, a.Hostname, logkey.Path, a.Path,
		logkey.Actor, a.Armer, logkey.RecordID, got.ID)
	return newView(got, c.pool.Pool(got.OrgID, got.Hostname, got.Path)), created, nil
}
