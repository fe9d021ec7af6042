package listen

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestFramingVerdicts(t *testing.T) {
	t.Parallel()
	decoy := "Transfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n"
	for _, tc := range []struct {
		name string
		in   string
		want []bool // verdicts in order
		off  bool   // following stopped
	}{
		{"guard/smuggling/plain", "GET / HTTP/1.1\r\nHost: a\r\n\r\n", []bool{false}, false},
		{"guard/smuggling/cl-te", "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", []bool{true}, false},
		{"guard/smuggling/te-cl-lowercase", "POST / HTTP/1.1\nTRANSFER-ENCODING: chunked\ncontent-length: 3\n\n0\n\n", []bool{true}, false},
		{
			"guard/smuggling/bodies-are-skipped",
			"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1a;ext=1\r\n" + decoy[:26] + "\r\n0\r\nX-T: 1\r\n\r\n" +
				"POST / HTTP/1.1\r\nContent-Length: " + strconv.Itoa(len(decoy)) + "\r\n\r\n" + decoy +
				"\r\nGET / HTTP/1.1\r\n\r\n",
			[]bool{false, false, false}, false,
		},
		{"guard/smuggling/options-star-has-no-handler", "OPTIONS * HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n", []bool{false}, false},
		{"guard/smuggling/h2-preface-stops", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", nil, true},
		{"guard/smuggling/upgrade-stops", "GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\nPOST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", []bool{false}, true},
		{"guard/smuggling/chunk-size-overflow-stops", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffff\r\n", []bool{false}, true},
		{"guard/oversize/long-lines", "GET /" + strings.Repeat("a", 1000) + " HTTP/1.1\r\nX: " + strings.Repeat("b", 1000) + "\r\nContent-Length: 0\r\n\r\n", []bool{false}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Whole, and one byte at a time: reads split anywhere.
			for _, step := range []int{len(tc.in), 1} {
				c := &framedConn{}
				for i := 0; i < len(tc.in); i += step {
					c.feed([]byte(tc.in[i:min(i+step, len(tc.in))]))
				}
				if !slices.Equal(c.verdicts, tc.want) || (c.state == frameOff) != tc.off {
					t.Errorf("step %d: verdicts %v, off %v; want %v, %v", step, c.verdicts, c.state == frameOff, tc.want, tc.off)
				}
			}
		})
	}
}

func TestFramingOverflowRefusesAll(t *testing.T) {
	t.Parallel()
	c := &framedConn{}
	c.feed([]byte(strings.Repeat("GET / HTTP/1.1\r\n\r\n", maxPendingHeads+1)))
	if !c.smuggled() {
		t.Error("smuggled() = false after too many heads read ahead, want true")
	}
}

// FuzzFraming feeds arbitrary bytes, whole and split in two: the parser
// must not panic, must agree with itself however reads split, and must
// keep its queue bounded.
func FuzzFraming(f *testing.F) {
	f.Add("POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 10)
	f.Add("GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n", 3)
	f.Add("POST / HTTP/1.1\nTransfer-Encoding: chunked\n\n5\nhello\n0\n\n", 40)
	f.Fuzz(func(t *testing.T, in string, split int) {
		whole := &framedConn{}
		whole.feed([]byte(in))
		parts := &framedConn{}
		if split < 0 || split > len(in) {
			split = len(in) / 2
		}
		parts.feed([]byte(in[:split]))
		parts.feed([]byte(in[split:]))
		if !slices.Equal(whole.verdicts, parts.verdicts) || whole.state != parts.state || whole.overflow != parts.overflow {
			t.Fatalf("split at %d: %v/%v/%v, whole: %v/%v/%v", split, parts.verdicts, parts.state, parts.overflow, whole.verdicts, whole.state, whole.overflow)
		}
		if len(whole.verdicts) > maxPendingHeads {
			t.Fatalf("%d verdicts queued, bound %d", len(whole.verdicts), maxPendingHeads)
		}
	})
}
