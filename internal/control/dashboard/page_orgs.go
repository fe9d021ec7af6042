package dashboard

import (
	"net/http"
	"net/url"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

func init() {
	register(&page{
		Name: "orgs", Title: "orgs.title", Group: navAdmin, Order: 70, Min: apitype.Master,
		Load: loadOrgs,
		Actions: map[string]func(*Ctx) (any, error){
			"create":    createOrg,
			"hostnames": setOrgHostnames,
		},
	})
}

// maxOrgsListed bounds the organizations whose hostname patterns the
// page reads, one API call each; the rest are listed without them.
const maxOrgsListed = 200

// orgsPage is the organizations page's data.
type orgsPage struct {
	Orgs []orgRow
	// More counts the organizations listed without their patterns.
	More int
	// Form is the refused form, to fill it in again; nil otherwise.
	Form url.Values
}

// orgRow is one organization and the hostname patterns it owns.
type orgRow struct {
	apitype.Org
	Patterns []string
	// Known says Patterns were read (false past maxOrgsListed).
	Known bool
}

func loadOrgs(c *Ctx) (any, error) {
	d := &orgsPage{Form: postedForm(c)}
	var orgs []apitype.Org
	if err := c.Get("/orgs", &orgs); err != nil {
		return d, err
	}
	for i, o := range orgs {
		row := orgRow{Org: o}
		if i < maxOrgsListed {
			var h apitype.OrgHostnames
			if err := c.Get("/orgs/"+url.PathEscape(o.ID)+"/hostnames", &h); err != nil {
				return d, err
			}
			row.Patterns, row.Known = h.Patterns, true
		} else {
			d.More++
		}
		d.Orgs = append(d.Orgs, row)
	}
	return d, nil
}

// createOrg creates the organization the form names.
func createOrg(c *Ctx) (any, error) {
	name, err := fieldText(c, c.R.PostForm, "name", "orgs.field.name", maxNameBytes, true)
	if err != nil {
		return nil, err
	}
	return nil, c.Send(http.MethodPost, "/orgs", apitype.CreateOrgRequest{Name: name}, nil)
}

// setOrgHostnames replaces the hostname patterns of the organization the
// form names; an empty list means it owns none.
func setOrgHostnames(c *Ctx) (any, error) {
	id := c.Form("id")
	if err := checkID(c, id); err != nil {
		return nil, err
	}
	ps, err := fieldList(c, "patterns", "orgs.field.patterns", 300)
	if err != nil {
		return nil, err
	}
	if ps, err = checkHostnames(c, "orgs.field.patterns", ps); err != nil {
		return nil, err
	}
	if ps == nil {
		ps = []string{}
	}
	return nil, c.Send(http.MethodPut, "/orgs/"+url.PathEscape(id)+"/hostnames", apitype.SetOrgHostnamesRequest{Patterns: ps}, nil)
}
