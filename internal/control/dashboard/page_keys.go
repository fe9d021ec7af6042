package dashboard

import (
	"net/http"
	"net/url"
	"slices"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

func init() {
	register(&page{
		Name: "keys", Title: "keys.title", Group: navAdmin, Order: 60,
		Load: func(c *Ctx) (any, error) { return loadKeys(c) },
		Actions: map[string]func(*Ctx) (any, error){
			"create": createKey,
			"delete": deleteKey,
		},
	})
}

// keysPage is the admin keys page's data.
type keysPage struct {
	Keys  []apitype.Key
	Roles []string
	// Orgs are the organizations a new key may go to (the master
	// token's choice); nil for a key.
	Orgs []apitype.Org
	// Minted is the key just created, its secret shown this once.
	Minted *apitype.MintedKey
	// Form is the refused form, to fill it in again; nil otherwise.
	Form url.Values
	// Warning is why the listing beside a new secret is incomplete.
	Warning string
}

func loadKeys(c *Ctx) (*keysPage, error) {
	d := &keysPage{Roles: apitype.Roles(), Form: postedForm(c)}
	if err := c.Get("/admin-keys", &d.Keys); err != nil {
		return d, err
	}
	var err error
	d.Orgs, err = loadOrgChoice(c)
	return d, err
}

// createKey mints an admin key of the form's name and role; the page
// shows its secret once.
func createKey(c *Ctx) (any, error) {
	var req apitype.CreateKeyRequest
	var err error
	if req.Name, err = fieldText(c, c.R.PostForm, "name", "keys.field.name", maxNameBytes, true); err != nil {
		return nil, err
	}
	req.Role = c.Form("role")
	if !slices.Contains(apitype.Roles(), req.Role) {
		return nil, &FormError{Message: c.T("keys.bad_role")}
	}
	if req.OrgID, err = fieldOrg(c); err != nil {
		return nil, err
	}
	var minted apitype.MintedKey
	if err := c.Send(http.MethodPost, "/admin-keys", req, &minted); err != nil {
		return nil, err
	}
	// The key exists now: the page must show its secret whatever the
	// listing says.
	d, err := loadKeys(c)
	if err != nil {
		d.Warning = errText(c, err)
	}
	d.Form, d.Minted = nil, &minted
	return d, nil
}

// deleteKey deletes the admin key the form names.
func deleteKey(c *Ctx) (any, error) {
	id := c.Form("id")
	if err := checkID(c, id); err != nil {
		return nil, err
	}
	return nil, c.Send(http.MethodDelete, "/admin-keys/"+url.PathEscape(id), nil, nil)
}
