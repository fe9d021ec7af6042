package dashboard

import "github.com/aperio-dev/aperio/wire"

func init() {
	register(&page{
		Name: "overview", Title: "overview.title", Order: 0,
		Load: func(c *Ctx) (any, error) {
			var clients []wire.ClientInfo
			if err := c.Get("/clients", &clients); err != nil {
				return nil, err
			}
			hosts := map[string]bool{}
			for _, ci := range clients {
				for _, h := range ci.Hostnames {
					hosts[h] = true
				}
			}
			return overview{Clients: clients, Hostnames: len(hosts)}, nil
		},
	})
}

// overview is the overview page's data.
type overview struct {
	Clients   []wire.ClientInfo
	Hostnames int
}
