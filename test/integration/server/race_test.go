//go:build race

package server_test

// raceEnabled reports whether the race detector is on; it slows the data
// path by an order of magnitude.
const raceEnabled = true
