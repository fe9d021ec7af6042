// Package router owns the route table and the visitor side of proxying:
// which connected client serves a request (by hostname and path prefix),
// and how the request and its response cross the tunnel. Registry holds
// the connected clients, their pools and the route table built from them;
// it is the tunnel.Registry the tunnel server reports sessions to. Router
// is the visitors' http.Handler: it runs each request through the
// admission and dispatch stages (methods of the request's admission),
// reading its Registry's table without a lock.
package router
