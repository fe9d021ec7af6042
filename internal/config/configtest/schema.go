package configtest

import (
	"encoding/json"
	"strings"
	"testing"
)

// SchemaNode decodes a generated JSON Schema and returns the schema of the
// dotted key name in it ("server.url" is properties.server.properties.url),
// looking into the object branch of a key that is both a value and a block
// (adaptive_concurrency). It fails the test when there is none.
func SchemaNode(tb testing.TB, schema []byte, name string) map[string]any {
	tb.Helper()
	var root map[string]any
	if err := json.Unmarshal(schema, &root); err != nil {
		tb.Fatalf("schema is not JSON: %v", err)
	}
	return SchemaPath(tb, root, name)
}

// SchemaPath is SchemaNode on a decoded schema.
func SchemaPath(tb testing.TB, node map[string]any, name string) map[string]any {
	tb.Helper()
	for _, part := range strings.Split(name, ".") {
		props, _ := node["properties"].(map[string]any)
		if props == nil {
			props = objectBranch(node)
		}
		next, ok := props[part].(map[string]any)
		if !ok {
			tb.Fatalf("schema has no %s (at %q)", name, part)
		}
		node = next
	}
	return node
}

// objectBranch returns the properties of the object alternative of an
// anyOf, or nil.
func objectBranch(node map[string]any) map[string]any {
	alts, _ := node["anyOf"].([]any)
	for _, a := range alts {
		if m, ok := a.(map[string]any); ok {
			if props, ok := m["properties"].(map[string]any); ok {
				return props
			}
		}
	}
	return nil
}

// ValueBranch returns the value alternative of a key that is both a value
// and a block, or node itself.
func ValueBranch(node map[string]any) map[string]any {
	alts, _ := node["anyOf"].([]any)
	for _, a := range alts {
		if m, ok := a.(map[string]any); ok && m["properties"] == nil {
			return m
		}
	}
	return node
}

// PublishedSchema checks that got, a binary's --print-schema output, is
// JSON and is the schema published at path (update rewrites it).
func PublishedSchema(tb testing.TB, path, got string, update bool) {
	tb.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(got), &v); err != nil {
		tb.Fatalf("--print-schema printed no JSON: %v", err)
	}
	Golden(tb, path, []byte(got), update)
}
