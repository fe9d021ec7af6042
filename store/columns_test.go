package store

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseTextArray(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{in: `{}`, want: []string{}},
		{in: `{a}`, want: []string{"a"}},
		{in: `{a,b.example.com,10.0.0.0/8}`, want: []string{"a", "b.example.com", "10.0.0.0/8"}},
		{in: `{"",a}`, want: []string{"", "a"}},
		{in: `{"two words","a,b","{braced}","\"quoted\"","back\\slash","NULL"}`,
			want: []string{"two words", "a,b", "{braced}", `"quoted"`, `back\slash`, "NULL"}},
		{in: `{ünïcødé,"[1]"," lead"}`, want: []string{"ünïcødé", "[1]", " lead"}},
		{in: ``, wantErr: true},
		{in: `[]`, wantErr: true},
		{in: `{a`, wantErr: true},
		{in: `{"a}`, wantErr: true},
		{in: `{"a\}`, wantErr: true},
		{in: `{a,,b}`, wantErr: true},
		{in: `{a,}`, wantErr: true},
		{in: `{NULL}`, wantErr: true},
		{in: `{{a},{b}}`, wantErr: true},
		{in: `{"a"b}`, wantErr: true},
		{in: `[1:2]={a,b}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseTextArray(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseTextArray(%q) = %q, %v; want error %v", tt.in, got, err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); !tt.wantErr && diff != "" {
				t.Errorf("parseTextArray(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

// textArray renders l as PostgreSQL prints a text[] (array_out): an element
// is double-quoted, with " and \ escaped, when it is empty, spells NULL or
// holds a brace, comma, quote, backslash or white space.
func textArray(l []string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, s := range l {
		if i > 0 {
			b.WriteByte(',')
		}
		if s != "" && !strings.EqualFold(s, "NULL") && !strings.ContainsAny(s, "{},\"\\ \t\n\r\v\f") {
			b.WriteString(s)
			continue
		}
		b.WriteByte('"')
		for _, c := range []byte(s) {
			if c == '"' || c == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(c)
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// FuzzParseTextArray: any list of strings, printed as PostgreSQL prints
// it, parses back to itself. The input is the list joined with NUL, which
// text never holds.
func FuzzParseTextArray(f *testing.F) {
	for _, s := range []string{"", "a", "a\x00b", "two words\x00a,b\x00{x}\x00\"q\"\x00b\\s\x00NULL\x00\x00null"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, joined string) {
		want := []string{}
		if joined != "" {
			want = strings.Split(joined, "\x00")
		}
		got, err := parseTextArray(textArray(want))
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("parseTextArray(%q) = %q, %v; want %q", textArray(want), got, err, want)
		}
	})
}
