// Package router owns the route table and the visitor side of proxying:
// which connected client serves a request (by hostname and path prefix),
// and how the request and its response cross the tunnel. It is the
// tunnel.Registry the tunnel server reports sessions to.
package router
