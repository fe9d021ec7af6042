package dashboard

import (
	"encoding/json"
	"net/http"
	"net/url"
	"sort"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// The clients page's levers over one connection: Disable is the server's
// own (the client takes no new requests, its tunnel stays up); Drain asks
// the client process to retire, on its next heartbeat's ack.

func init() {
	register(&page{
		Name: "clients", Title: "clients.title", Order: 10,
		Scripts: []string{"clients.js"},
		Load:    loadClients,
		Actions: map[string]func(*Ctx) (any, error){
			"disable": clientAction("disable"),
			"enable":  clientAction("enable"),
			"drain":   clientAction("drain"),
		},
	})
}

// clientsView is the clients page's data: one row per connection and
// service, a connection's rows together.
type clientsView struct {
	Rows []clientRow
	// Ports are the public ports the caller may see; none when the
	// server has no tcp_port_range (or answers GET /ports with an
	// error: the clients are shown anyway).
	Ports []apitype.PortInfo
	// AccessLabels is the JSON object of every access word's label in
	// the request's language, for clients.js to draw the same cells.
	AccessLabels string
}

// clientRow is one service of a connected client. First marks the first
// row of its connection, which carries the connection's actions.
type clientRow struct {
	apitype.ClientInfo
	First bool
	// Ejected is set while the service's outlier ejection lasts.
	Ejected bool
	// AccessLabels are the service's access words in the request's
	// language (accessLabel); none when it announced no access control.
	AccessLabels []string
}

// accessLabel is an access word of apitype.ClientInfo.Access as the page
// shows it: its catalog label, or the word itself when a newer server
// sends one this dashboard does not know.
func accessLabel(c *Ctx, word string) string {
	for _, w := range apitype.AccessWords() {
		if w == word {
			return c.T("clients.access." + w)
		}
	}
	return word
}

func loadClients(c *Ctx) (any, error) {
	var clients []apitype.ClientInfo
	if err := c.Get("/clients", &clients); err != nil {
		return clientsView{}, err
	}
	sortClients(clients)
	now := c.u.now()
	v := clientsView{Rows: make([]clientRow, 0, len(clients))}
	for i, ci := range clients {
		r := clientRow{
			ClientInfo: ci,
			First:      i == 0 || clients[i-1].ID != ci.ID,
			Ejected:    ci.EjectedUntil != nil && ci.EjectedUntil.After(now),
		}
		for _, w := range ci.Access {
			r.AccessLabels = append(r.AccessLabels, accessLabel(c, w))
		}
		v.Rows = append(v.Rows, r)
	}
	labels := map[string]string{}
	for _, w := range apitype.AccessWords() {
		labels[w] = accessLabel(c, w)
	}
	if b, err := json.Marshal(labels); err == nil {
		v.AccessLabels = string(b)
	}
	if err := c.Get("/ports", &v.Ports); err != nil {
		v.Ports = nil
	}
	return v, nil
}

// sortClients orders clients by name, then connection (so a connection's
// services are adjacent), keeping the API's order of its services.
func sortClients(clients []apitype.ClientInfo) {
	sort.SliceStable(clients, func(i, j int) bool {
		a, b := clients[i], clients[j]
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.ID < b.ID
	})
}

// maxClientID bounds a client id taken from a form; the API's bound is
// 256 bytes and session ids are 16 hex digits.
const maxClientID = 256

// validClientID reports whether id may go into the API's path as one
// segment: letters, digits and "-_.:" only, and no "..", so a form cannot
// aim the call at another route.
func validClientID(id string) bool {
	if id == "" || len(id) > maxClientID || id == "." {
		return false
	}
	prevDot := false
	for i := 0; i < len(id); i++ {
		c := id[i]
		dot := c == '.'
		if dot && prevDot {
			return false
		}
		prevDot = dot
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == ':' || dot) {
			return false
		}
	}
	return true
}

// clientAction is the disable, enable or drain form: POST
// /clients/{id}/<verb>.
func clientAction(verb string) func(*Ctx) (any, error) {
	return func(c *Ctx) (any, error) {
		id := c.Form("id")
		if !validClientID(id) {
			return nil, &FormError{Message: c.T("clients.bad_id")}
		}
		return nil, c.Send(http.MethodPost, "/clients/"+url.PathEscape(id)+"/"+verb, nil, nil)
	}
}
