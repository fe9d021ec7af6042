// Command tcpbench measures a TCP path's throughput for bench/tcp.sh.
//
//	tcpbench serve ADDR          accept connections on ADDR: a connection
//	                             that starts "up\n" is read to its end and
//	                             answered with the byte count; one that
//	                             starts "down N\n" is sent N bytes
//	tcpbench up ADDR BYTES       send BYTES, half-close, wait for the count
//	tcpbench down ADDR BYTES     receive BYTES
//
// up and down print "BYTES SECONDS MB/s" on stdout and exit 1 when fewer
// bytes than asked for went through.
package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

const chunk = 256 << 10

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: tcpbench serve ADDR | up ADDR BYTES | down ADDR BYTES")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2])
	case "up", "down":
		if len(os.Args) != 4 {
			err = fmt.Errorf("%s needs ADDR BYTES", os.Args[1])
			break
		}
		var n int64
		if n, err = strconv.ParseInt(os.Args[3], 10, 64); err == nil {
			err = run(os.Args[1], os.Args[2], n)
		}
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tcpbench:", err)
		os.Exit(1)
	}
}

func serve(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go handle(c)
	}
}

func handle(c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, chunk)
	line, err := br.ReadString('\n')
	if err != nil {
		return
	}
	switch f := strings.Fields(line); {
	case len(f) == 1 && f[0] == "up":
		n, _ := io.Copy(io.Discard, br)
		fmt.Fprintf(c, "%d\n", n)
	case len(f) == 2 && f[0] == "down":
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err == nil {
			io.CopyN(c, zeros{}, n)
		}
	}
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func run(mode, addr string, want int64) error {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Minute))
	start := time.Now()
	var got int64
	if mode == "up" {
		io.WriteString(c, "up\n")
		if _, err := io.CopyBuffer(c, io.LimitReader(zeros{}, want), make([]byte, chunk)); err != nil {
			return err
		}
		c.(*net.TCPConn).CloseWrite()
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return fmt.Errorf("no byte count from the sink: %w", err)
		}
		got, _ = strconv.ParseInt(strings.TrimSpace(line), 10, 64)
	} else {
		fmt.Fprintf(c, "down %d\n", want)
		got, err = io.CopyBuffer(io.Discard, c, make([]byte, chunk))
		if err != nil {
			return err
		}
	}
	secs := time.Since(start).Seconds()
	fmt.Printf("%d %.3f %.1f\n", got, secs, float64(got)/secs/1e6)
	if got != want {
		return fmt.Errorf("%d of %d bytes went through", got, want)
	}
	return nil
}
