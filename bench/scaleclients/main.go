// Command scaleclients is the harness of bench/scale-clients.sh: how one
// aperio-server copes with many connected clients (issue #21). It has two
// modes:
//
//	scaleclients run -server BIN [flags]   the measurement: for each
//	                                       client count, a fresh server,
//	                                       the clients, the figures; one
//	                                       table on stdout
//	scaleclients clients [flags]           one child of run: COUNT agents
//	                                       of package agent in this one
//	                                       process, started at a bounded
//	                                       rate, until stdin closes
//
// run starts the clients in child processes of its own (-per-proc clients
// each), so that no process needs more descriptors than RLIMIT_NOFILE
// allows, and spreads their connections over loopback source addresses
// (-per-ip clients each) so that no source address runs out of ephemeral
// ports. Progress goes to stderr.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: scaleclients run -server BIN [flags] | scaleclients clients [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = runMain(os.Args[2:])
	case "clients":
		err = clientsMain(os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q (run or clients)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "scaleclients:", err)
		os.Exit(1)
	}
}
