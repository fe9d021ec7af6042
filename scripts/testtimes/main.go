// Command testtimes prints, from go test -json streams, each package's
// result and elapsed time, slowest first, and the total: the table make
// test ends with, so that a package that grew slow is seen in every run.
//
//	go run ./scripts/testtimes [-over 120s] FILE.json...
//
// With -over, it exits 1 when a package took longer than that.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"time"
)

// event is the part of a test2json record this reads.
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
}

type result struct {
	pkg     string
	action  string
	elapsed time.Duration
}

func main() {
	over := flag.Duration("over", 0, "exit 1 when a package took longer than this (0: never)")
	flag.Parse()
	var results []result
	for _, name := range flag.Args() {
		rs, err := read(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testtimes:", err)
			os.Exit(2)
		}
		results = append(results, rs...)
	}
	slices.SortFunc(results, func(a, b result) int { return int(b.elapsed - a.elapsed) })
	var total time.Duration
	slow := 0
	fmt.Println("package times, slowest first:")
	for _, r := range results {
		if r.action == "skip" {
			continue // a package without test files
		}
		total += r.elapsed
		mark := ""
		if *over > 0 && r.elapsed > *over {
			mark = fmt.Sprintf("  over %s", *over)
			slow++
		}
		fmt.Printf("  %-5s %8.1fs  %s%s\n", r.action, r.elapsed.Seconds(), r.pkg, mark)
	}
	fmt.Printf("  total %7.1fs  (summed over packages; they run in parallel)\n", total.Seconds())
	if slow > 0 {
		fmt.Printf("testtimes: %d package(s) over %s\n", slow, *over)
		os.Exit(1)
	}
}

// read returns the package-level results of one go test -json stream.
func read(name string) ([]result, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []result
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Test != "" || e.Package == "" {
			continue
		}
		switch e.Action {
		case "pass", "fail", "skip":
			out = append(out, result{pkg: e.Package, action: e.Action, elapsed: time.Duration(e.Elapsed * float64(time.Second))})
		}
	}
	return out, sc.Err()
}
