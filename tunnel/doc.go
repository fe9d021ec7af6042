// Package tunnel owns the connection between aperio-client and
// aperio-server: the WebSocket upgrade that carries a yamux session, the
// versioned handshake and heartbeat on the control stream, and the HTTP/1.1
// exchanges that proxied requests make over pooled data streams.
//
// The server side is Server (an http.Handler for the upgrade) and Session
// (one connected client, whose RoundTrip sends a request to it). The client
// side is Client, which dials, reconnects and hands every request it
// receives to a Forwarder. docs/tunnel-protocol.md describes the wire format.
package tunnel
