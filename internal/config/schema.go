package config

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/aperio-dev/aperio/tunnel"
)

// The configuration files' JSON Schema (draft 2020-12), generated from the
// key tables, so that an editor can complete and check aperio.yaml and
// aperio-server.yaml. It describes each key's canonical spelling: dotted
// names nest (server.url is server: {url: ...}). The loaders also read the
// flat and dashed spellings (server_url), and a value may be a ${VAR}
// reference whatever its type, so a scalar of a number or boolean kind also
// validates as a string holding "${"; --check-config remains the judge.

// SchemaDraft is the JSON Schema dialect of the generated schemas.
const SchemaDraft = "https://json-schema.org/draft/2020-12/schema"

// Schema returns the JSON Schema of a configuration file whose top-level
// keys are keys, titled title. extra holds further top-level properties
// (services, include), already in schema form.
func Schema(title string, keys []Key, extra map[string]any) ([]byte, error) {
	root := objectOf(keys)
	root["$schema"] = SchemaDraft
	root["title"] = title
	root["$defs"] = schemaDefs()
	props := root["properties"].(map[string]any)
	for k, v := range extra {
		props[k] = v
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(root); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// schemaGroup is a dotted prefix's object while it is built: its leaf (a
// key that is also the group's switch, like adaptive_concurrency) and its
// children by the next segment, in table order.
type schemaGroup struct {
	leaf     *Key
	children map[string]*schemaGroup
	order    []string
}

func (g *schemaGroup) child(name string) *schemaGroup {
	c, ok := g.children[name]
	if !ok {
		c = &schemaGroup{children: map[string]*schemaGroup{}}
		g.children[name] = c
		g.order = append(g.order, name)
	}
	return c
}

// objectOf returns the schema of an object holding keys, dotted names
// nested.
func objectOf(keys []Key) map[string]any {
	root := &schemaGroup{children: map[string]*schemaGroup{}}
	for i := range keys {
		g := root
		for _, part := range strings.Split(keys[i].Name, ".") {
			g = g.child(part)
		}
		g.leaf = &keys[i]
	}
	return root.object()
}

func (g *schemaGroup) object() map[string]any {
	props := make(map[string]any, len(g.order))
	for _, name := range g.order {
		props[name] = g.children[name].schema()
	}
	return map[string]any{"type": "object", "properties": props}
}

func (g *schemaGroup) schema() map[string]any {
	switch {
	case len(g.children) == 0:
		return keySchema(*g.leaf)
	case g.leaf == nil:
		return g.object()
	}
	// Both a value and a block: the block's "enabled" is the value, and
	// true when the block leaves it out.
	obj := g.object()
	enabled := keySchema(*g.leaf)
	enabled["default"] = true
	obj["properties"].(map[string]any)["enabled"] = enabled
	return map[string]any{
		"description": g.leaf.Usage,
		"anyOf":       []any{keySchema(*g.leaf), obj},
	}
}

// schemaDefs are the shapes keys of one kind share, under $defs. A scalar
// of a number or boolean kind may also be a string holding a ${VAR}
// reference: the loader expands it before reading the value.
func schemaDefs() map[string]any {
	expansion := map[string]any{"type": "string", "pattern": `\$\{`, "description": "a ${VAR} or ${VAR:-default} reference, expanded from the environment"}
	or := func(s map[string]any) map[string]any {
		return map[string]any{"anyOf": []any{s, map[string]any{"$ref": "#/$defs/expansion"}}}
	}
	return map[string]any{
		"expansion": expansion,
		"integer":   or(map[string]any{"type": "integer"}),
		"number":    or(map[string]any{"type": "number"}),
		"boolean":   or(map[string]any{"anyOf": []any{map[string]any{"type": "boolean"}, map[string]any{"enum": []any{0, 1}}}}),
		"duration": map[string]any{
			"description": "a duration: 250ms, 45s, 15m, 1h30m, 2d, or a number of seconds",
			"type":        []string{"string", "number"},
		},
		"size": map[string]any{
			"description": "a size in bytes: 1048576, 512KiB, 10MiB, 1GiB",
			"type":        []string{"string", "integer"},
		},
		"list": map[string]any{
			"description": "a list: a yaml sequence or a comma-separated string",
			"type":        []string{"array", "string"},
			"items":       map[string]any{"type": "string"},
		},
		"intlist": map[string]any{
			"description": "a list of integers: a yaml sequence or a comma-separated string",
			"type":        []string{"array", "string"},
			"items":       map[string]any{"type": "integer"},
		},
		"map": map[string]any{
			"description":          "a mapping of strings, or k=v,k2=v2",
			"type":                 []string{"object", "string"},
			"additionalProperties": map[string]any{"type": "string"},
		},
		"block": map[string]any{
			"description": "a structure of its own, checked by --check-config",
			"type":        []string{"array", "object", "string"},
		},
	}
}

// kindDefs names the $defs entry of each kind that has one.
var kindDefs = map[Kind]string{
	KindInt: "integer", KindFloat: "number", KindBool: "boolean", KindDuration: "duration",
	KindSize: "size", KindList: "list", KindIntList: "intlist", KindMap: "map", KindBlock: "block",
}

// keySchema is the schema of one key's value.
func keySchema(k Key) map[string]any {
	s := map[string]any{"type": "string"}
	if def, ok := kindDefs[k.Kind]; ok {
		s = map[string]any{"$ref": "#/$defs/" + def}
	} else if k.Kind == KindEnum && len(k.Values) > 0 {
		s["enum"] = k.Values
	}
	if k.Usage != "" {
		s["description"] = k.Usage
	}
	if d, ok := schemaDefault(k); ok {
		s["default"] = d
	}
	if k.Secret {
		s["writeOnly"] = true
	}
	return s
}

// schemaDefault is k's Default as the JSON value of its kind.
func schemaDefault(k Key) (any, bool) {
	if k.Default == "" || k.Secret || k.Kind == KindBlock {
		return nil, false
	}
	switch k.Kind {
	case KindInt:
		n, err := strconv.Atoi(k.Default)
		return n, err == nil
	case KindFloat:
		f, err := strconv.ParseFloat(k.Default, 64)
		return f, err == nil
	case KindBool:
		b, err := strconv.ParseBool(k.Default)
		return b, err == nil
	case KindList:
		return splitList(k.Default), true
	case KindIntList:
		var ns []int
		for _, it := range splitList(k.Default) {
			n, err := strconv.Atoi(it)
			if err != nil {
				return nil, false
			}
			ns = append(ns, n)
		}
		return ns, true
	case KindMap:
		return nil, false
	}
	return k.Default, true
}

// ClientSchema returns the JSON Schema of aperio.yaml (and ~/.aperio.yaml):
// the top-level keys, include and services[] with each entry's keys.
func ClientSchema() ([]byte, error) {
	var top []Key
	for _, k := range ClientKeys() {
		if _, single := singleFields[k.Name]; !single {
			top = append(top, k)
		}
	}
	// A service's keys default to the top-level ones: no default of
	// their own.
	svc := append(keysOf(serviceSettings(), nil), keysOf(serviceAdaptiveSettings(), nil)...)
	item := objectOf(svc)
	item["description"] = "one local app and the hostnames it serves; unset keys take the top-level value"
	return Schema("aperio-client configuration (aperio.yaml)", top, map[string]any{
		"include":  IncludeSchema(),
		"services": map[string]any{"type": "array", "description": "the services this client publishes", "items": item},
		"expose":   map[string]any{"type": "array", "maxItems": tunnel.MaxExpose, "description": "public TCP and UDP ports this client asks for", "items": objectOf(keysOf(exposeSettings(), ptr(DefaultExpose())))},
	})
}

// IncludeSchema is the schema of include:, which both files take.
func IncludeSchema() map[string]any {
	return map[string]any{
		"description": "files (or globs) read before this one; this file's keys win",
		"type":        []string{"array", "string"},
		"items":       map[string]any{"type": "string"},
	}
}
