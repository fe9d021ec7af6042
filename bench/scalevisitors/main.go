// Command scalevisitors is the visitor side of the scale benchmarks of
// issue #21 (bench/scale-visitors.sh and bench/scale-held.sh); the scripts
// start the real aperio-server and aperio-client, read the server's
// memory from /proc and print the tables. It is a benchmark tool and is
// linked into no binary.
//
//	scalevisitors backend -listen ADDR
//	scalevisitors idle    -addr ADDR -host H -n N [-src IP] [-hold 10m]
//	scalevisitors load    -addr ADDR -host H [-c 64] [-d 5s]
//	scalevisitors held    -addr ADDR -host H -n N -metrics-token T [-proto h1|h2c] [-timeout 8m]
//	scalevisitors armed   -addr ADDR -host H -token T [-timeout 60s]
//
// backend is the service behind the tunnel (200 "ok") and the scaling
// provider (POST /scale: 202, nothing started), and prints "listening
// ADDR". idle opens N keep-alive connections from source address src,
// each sends one request and then sits idle; it prints "ready OPEN
// FAILED" and, on SIGUSR1, sends a second request on every connection and
// prints "alive OK of N" (the server closed none meanwhile) and exits.
// load runs c keep-alive connections for d and prints "REQUESTS REQ/S
// NON200 ERRORS". held sends N requests at once (h1: one HTTP/1.1
// connection each; h2c: HTTP/2 without TLS, multiplexed), waits for the server to hold them all (aperio_requests_queued), prints
// "held N", then waits for every answer and prints "answers STATUS×COUNT
// ...". armed waits until the server would hold a request for host (the
// explain API's cold_start step waits).
//
// Every wait has a deadline; progress goes to stderr.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: scalevisitors backend|idle|load|held|armed [flags]")
		os.Exit(2)
	}
	var err error
	args := os.Args[2:]
	switch os.Args[1] {
	case "backend":
		err = runBackend(args)
	case "idle":
		err = runIdle(args)
	case "load":
		err = runLoad(args)
	case "held":
		err = runHeld(args)
	case "armed":
		err = runArmed(args)
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "scalevisitors %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
