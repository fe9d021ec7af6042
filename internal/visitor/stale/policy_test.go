package stale

import (
	"reflect"
	"testing"
	"time"
)

func TestParseCacheControl(t *testing.T) {
	tests := []struct {
		name string
		in   []string
		want directives
	}{
		{"empty", nil, directives{}},
		{"flags, any case and spacing", []string{" No-Store ,PUBLIC,\tmust-revalidate , proxy-revalidate"},
			directives{noStore: true, public: true, mustRevalidate: true, proxyRevalidate: true}},
		{"several lines", []string{"max-age=60", "stale-if-error=30"},
			directives{maxAge: 60, hasMaxAge: true, staleIfError: 30, hasStaleIfErr: true}},
		{"private unqualified", []string{"private"}, directives{private: true}},
		{"private qualified, commas inside quotes", []string{`private="X-A, X-B", max-age=5`},
			directives{privateFields: []string{"X-A, X-B"}, maxAge: 5, hasMaxAge: true}},
		{"private token form is unqualified", []string{"private=X-A"}, directives{private: true}},
		{"no-cache qualified", []string{`no-cache="Set-Cookie"`}, directives{noCacheFields: []string{"Set-Cookie"}}},
		{"escaped quote inside quotes", []string{`no-cache="a\"b, no-store", public`},
			directives{noCacheFields: []string{`a\"b, no-store`}, public: true}},
		{"unterminated quote", []string{`no-cache="a, no-store`}, directives{noCacheFields: []string{"a, no-store"}}},
		{"quoted delta accepted (RFC 9111 §5.2)", []string{`max-age="60"`}, directives{maxAge: 60, hasMaxAge: true}},
		{"duplicate keeps the smaller", []string{"s-maxage=600, s-maxage=60, s-maxage=6000"}, directives{sMaxAge: 60, hasSMaxAge: true}},
		{"invalid delta is 0", []string{"stale-if-error=-5"}, directives{staleIfError: 0, hasStaleIfErr: true}},
		{"empty delta is 0", []string{"max-age="}, directives{maxAge: 0, hasMaxAge: true}},
		{"huge delta clamped", []string{"max-age=99999999999999999999999"}, directives{maxAge: maxDelta, hasMaxAge: true}},
		{"unknown directives ignored", []string{"immutable, stale-while-revalidate=5, community=\"UCI\""}, directives{}},
		{"junk", []string{",,=,=x,\"\",  ,"}, directives{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := parseCacheControl(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("parseCacheControl(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestStaleLimit(t *testing.T) {
	tests := []struct {
		in     string
		want   time.Duration
		wantOK bool
	}{
		{"", 0, false},
		{"max-age=60", 0, false},
		{"stale-if-error=30", 30 * time.Second, true},
		{"max-age=60, stale-if-error=30", 90 * time.Second, true},
		{"max-age=60, s-maxage=600, stale-if-error=30", 630 * time.Second, true},
	}
	for _, tt := range tests {
		d := parseCacheControl([]string{tt.in})
		if got, ok := d.staleLimit(); got != tt.want || ok != tt.wantOK {
			t.Errorf("staleLimit(%q) = %v, %v, want %v, %v", tt.in, got, ok, tt.want, tt.wantOK)
		}
	}
}
