package dashboard

import (
	"bytes"
	"html/template"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

func TestArgs(t *testing.T) {
	m, err := args("a", 1, "b", "two")
	if err != nil || len(m) != 2 || m["a"] != 1 || m["b"] != "two" {
		t.Fatalf(`args("a", 1, "b", "two") = %v, %v, want map[a:1 b:two]`, m, err)
	}
	many := make([]any, 0, 2*(maxArgs+1))
	for i := 0; i <= maxArgs; i++ {
		many = append(many, strings.Repeat("k", i+1), i)
	}
	for name, kv := range map[string][]any{
		"odd":        {"a", 1, "b"},
		"non-string": {1, "a"},
		"nil-key":    {nil, "a"},
		"repeated":   {"a", 1, "a", 2},
		"too-many":   many,
	} {
		t.Run(name, func(t *testing.T) {
			if m, err := args(kv...); err == nil {
				t.Errorf("args(%v) = %v, nil, want an error", kv, m)
			}
		})
	}
}

// renderPart renders body, a template calling the partials, with v.
func renderPart(t testing.TB, body string, v *view) (string, error) {
	t.Helper()
	tm := template.Must(template.New("parts.html").Funcs(funcs).ParseFS(templateFS, "templates/parts.html"))
	tm = template.Must(tm.New("page").Parse(body))
	var b bytes.Buffer
	err := tm.ExecuteTemplate(&b, "page", v)
	return b.String(), err
}

// TestRowActionPartial pins the markup the pages' row buttons share, and
// that a bad args call fails the render instead of writing half a form.
func TestRowActionPartial(t *testing.T) {
	v := &view{Ctx: &Ctx{Who: apitype.WhoAmI{CSRF: "tok"}}}
	b, err := renderPart(t, `{{template "rowaction" args "view" . "action" "/aperio/ui/x/delete" "field" "id" "value" "a\"b" "confirm" "Delete <b>?" "label" "Delete a" "text" "Delete"}}`, v)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`<form method="post" action="/aperio/ui/x/delete" class="inline" data-confirm="Delete &lt;b&gt;?">`,
		`<input type="hidden" name="csrf" value="tok">`,
		`<input type="hidden" name="id" value="a&#34;b">`,
		`<button type="submit" class="danger" aria-label="Delete a">Delete</button>`,
	} {
		if !strings.Contains(b, want) {
			t.Errorf("rowaction = %s, want it to contain %s", b, want)
		}
	}
	b, err = renderPart(t, `{{template "rowaction" args "view" . "action" "/a" "field" "id" "value" "1" "confirm" "?" "text" "Stop"}}`, v)
	if err != nil || !strings.Contains(b, `<button type="submit" class="danger">Stop</button>`) {
		t.Errorf("rowaction without a label = %s, %v, want a button without aria-label", b, err)
	}
	b, err = renderPart(t, `{{template "rowaction" args "view" . "action"}}`, v)
	if err == nil || strings.Contains(b, "<form") {
		t.Errorf("rowaction with odd args = %q, %v, want an error and no form", b, err)
	}
}

// TestListPartial pins the list frame: the table with the page's head
// and rows while there are items, only the none line without.
func TestListPartial(t *testing.T) {
	const page = `{{template "list" args "view" . "id" "things" "items" .Data "none" "None yet."}}` +
		`{{define "list-head"}}<th scope="col">Name</th>{{end}}` +
		`{{define "list-rows"}}{{range .Data}}<tr><td>{{.}}</td></tr>{{end}}{{end}}`
	b, err := renderPart(t, page, &view{Data: []string{"a<b"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<div class="table-wrap">`, `<table id="things">`, `<thead><tr><th scope="col">Name</th>`, `<tbody><tr><td>a&lt;b</td></tr>`} {
		if !strings.Contains(b, want) {
			t.Errorf("list with an item = %s, want it to contain %s", b, want)
		}
	}
	if strings.Contains(b, "None yet.") {
		t.Errorf("list with an item shows the none line: %s", b)
	}
	b, err = renderPart(t, page, &view{Data: []string{}})
	if err != nil || strings.TrimSpace(b) != "<p>None yet.</p>" {
		t.Errorf("empty list = %q, %v, want only <p>None yet.</p>", b, err)
	}
}
