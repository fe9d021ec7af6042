package dashboard

import (
	"net/http"
	"net/url"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

func init() {
	register(&page{
		Name: "tokens", Title: "tokens.title", Group: navAdmin, Order: 50,
		Load: func(c *Ctx) (any, error) { return loadTokens(c) },
		Actions: map[string]func(*Ctx) (any, error){
			"create": createToken,
			"revoke": revokeToken,
		},
	})
}

// tokensPage is the tokens page's data.
type tokensPage struct {
	Tokens []apitype.Token
	// Orgs are the organizations a new token may go to: the master
	// token's choice; nil for a key, which mints in its own.
	Orgs []apitype.Org
	// Minted is the token just created, its secret shown this once.
	Minted *apitype.MintedToken
	// Form is the refused form, to fill it in again; nil otherwise.
	Form url.Values
	// Warning is why the listing beside a new secret is incomplete.
	Warning string
}

// loadTokens reads the tokens (and, for the master token, the
// organizations), keeping a refused form's values.
func loadTokens(c *Ctx) (*tokensPage, error) {
	d := &tokensPage{Form: postedForm(c)}
	if err := c.Get("/tokens", &d.Tokens); err != nil {
		return d, err
	}
	var err error
	d.Orgs, err = loadOrgChoice(c)
	return d, err
}

// createToken mints a token from the form: name, hostnames, allowed IPs,
// expiry (a time or a duration from now), and for the master token an
// organization. The page shows the secret once.
func createToken(c *Ctx) (any, error) {
	req := apitype.CreateTokenRequest{}
	var err error
	if req.Name, err = fieldText(c, c.R.PostForm, "name", "tokens.field.name", maxNameBytes, true); err != nil {
		return nil, err
	}
	hosts, err := fieldList(c, "hostnames", "tokens.field.hostnames", 300)
	if err != nil {
		return nil, err
	}
	if req.Hostnames, err = checkHostnames(c, "tokens.field.hostnames", hosts); err != nil {
		return nil, err
	}
	if len(req.Hostnames) == 0 {
		return nil, &FormError{Message: c.T("form.required", c.T("tokens.field.hostnames"))}
	}
	if req.AllowedIPs, err = fieldList(c, "allowed_ips", "tokens.field.allowed_ips", 64); err != nil {
		return nil, err
	}
	exp, err := fieldText(c, c.R.PostForm, "expires", "tokens.field.expires", 64, false)
	if err != nil {
		return nil, err
	}
	if exp != "" {
		now := c.u.now()
		var at time.Time
		if d, ok := parseDuration(exp, maxTokenLifetime); ok {
			at = now.Add(d).UTC().Truncate(time.Second)
		} else if t, ok := parseTime(exp); ok {
			at = t
		} else {
			return nil, &FormError{Message: c.T("tokens.bad_expiry", exp)}
		}
		if !at.After(now) {
			return nil, &FormError{Message: c.T("tokens.past_expiry", exp)}
		}
		req.ExpiresAt = &at
	}
	if req.OrgID, err = fieldOrg(c); err != nil {
		return nil, err
	}
	var minted apitype.MintedToken
	if err := c.Send(http.MethodPost, "/tokens", req, &minted); err != nil {
		return nil, err
	}
	// The token exists now: whatever the listing says, the page must
	// show its secret, the only time it can.
	d, err := loadTokens(c)
	if err != nil {
		d.Warning = errText(c, err)
	}
	d.Form, d.Minted = nil, &minted
	return d, nil
}

// revokeToken revokes the token the form names.
func revokeToken(c *Ctx) (any, error) {
	id := c.Form("id")
	if err := checkID(c, id); err != nil {
		return nil, err
	}
	return nil, c.Send(http.MethodDelete, "/tokens/"+url.PathEscape(id), nil, nil)
}

// postedForm is the request's posted form when it is one (a refused
// action re-renders the page with it), else nil.
func postedForm(c *Ctx) url.Values {
	if c.R.Method == http.MethodPost {
		return c.R.PostForm
	}
	return nil
}

// loadOrgChoice lists the organizations for the master token, who may
// create in any; a key creates in its own (nil).
func loadOrgChoice(c *Ctx) ([]apitype.Org, error) {
	if !c.Can(apitype.Master) {
		return nil, nil
	}
	var orgs []apitype.Org
	err := c.Get("/orgs", &orgs)
	return orgs, err
}

// fieldOrg is the organization a create form names: only the master
// token's forms have the field; "" means the API's default.
func fieldOrg(c *Ctx) (string, error) {
	id := c.Form("org_id")
	if id == "" {
		return "", nil
	}
	if !c.Can(apitype.Master) {
		return "", &FormError{Message: c.T("form.bad_id")}
	}
	return id, checkID(c, id)
}
