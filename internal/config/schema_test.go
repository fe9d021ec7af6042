package config

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/config/configtest"
)

// TestClientSchemaCoversKeys: every key of the file is in the schema at its
// dotted path, typed by its kind, with its usage as description and its
// default as a JSON value of that kind; each service entry has every
// per-service key.
func TestClientSchemaCoversKeys(t *testing.T) {
	b, err := ClientSchema()
	if err != nil {
		t.Fatal(err)
	}
	var root map[string]any
	if err := json.Unmarshal(b, &root); err != nil {
		t.Fatalf("ClientSchema is not JSON: %v", err)
	}
	if root["$schema"] != SchemaDraft || root["type"] != "object" {
		t.Fatalf("schema head = %v %v, want draft 2020-12 and an object", root["$schema"], root["type"])
	}
	defs, _ := root["$defs"].(map[string]any)
	n := 0
	for _, k := range ClientKeys() {
		if _, single := singleFields[k.Name]; single {
			if _, ok := root["properties"].(map[string]any)[k.Name]; ok {
				t.Errorf("schema has the single-service key %s at the top level, which the file refuses", k.Name)
			}
			continue
		}
		n++
		checkKeySchema(t, defs, configtest.ValueBranch(configtest.SchemaPath(t, root, k.Name)), k)
	}
	if n < 40 {
		t.Errorf("checked %d top-level keys, want every one of them", n)
	}
	items := configtest.SchemaPath(t, root, "services")["items"].(map[string]any)
	for _, k := range append(keysOf(serviceSettings(), nil), keysOf(serviceAdaptiveSettings(), nil)...) {
		node := configtest.ValueBranch(configtest.SchemaPath(t, items, k.Name))
		checkKeySchema(t, defs, node, k)
		if _, ok := node["default"]; ok {
			t.Errorf("services[].%s has a default; it inherits the top-level one", k.Name)
		}
	}
	if configtest.SchemaPath(t, root, "include")["items"] == nil {
		t.Error("include is not a list of files")
	}
}

func checkKeySchema(t *testing.T, defs map[string]any, node map[string]any, k Key) {
	t.Helper()
	if node["description"] != k.Usage {
		t.Errorf("%s: description %q, want the key's usage %q", k.Name, node["description"], k.Usage)
	}
	if def, ok := kindDefs[k.Kind]; ok {
		ref := "#/$defs/" + def
		if node["$ref"] != ref || defs[def] == nil {
			t.Errorf("%s (%s): $ref %v, want %s, defined", k.Name, k.Kind, node["$ref"], ref)
		}
	} else if node["type"] != "string" {
		t.Errorf("%s (%s): type %v, want string", k.Name, k.Kind, node["type"])
	}
	if k.Kind == KindEnum {
		got, _ := json.Marshal(node["enum"])
		want, _ := json.Marshal(k.Values)
		if len(k.Values) == 0 || string(got) != string(want) {
			t.Errorf("%s: enum %s, want the key's values %s", k.Name, got, want)
		}
	}
	if k.Secret && node["writeOnly"] != true {
		t.Errorf("%s: a secret not marked writeOnly", k.Name)
	}
	d, has := node["default"]
	if k.Default == "" || k.Secret || k.Kind == KindBlock || k.Kind == KindMap {
		if has {
			t.Errorf("%s: default %v, want none", k.Name, d)
		}
		return
	}
	if !has {
		t.Errorf("%s: no default, want %q", k.Name, k.Default)
		return
	}
	// The default, written back as text, is the key's.
	var text string
	switch v := d.(type) {
	case []any:
		parts := make([]string, len(v))
		for i, p := range v {
			parts[i] = strings.Trim(jsonText(p), `"`)
		}
		text = strings.Join(parts, ",")
	default:
		text = strings.Trim(jsonText(v), `"`)
	}
	if text != k.Default {
		t.Errorf("%s: default %v, want %q", k.Name, d, k.Default)
	}
	want := map[Kind]reflect.Kind{KindInt: reflect.Float64, KindFloat: reflect.Float64, KindBool: reflect.Bool, KindList: reflect.Slice}
	if rk, ok := want[k.Kind]; ok && reflect.TypeOf(d).Kind() != rk {
		t.Errorf("%s: default %v is a %T, want a JSON value of kind %s", k.Name, d, d, k.Kind)
	}
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestEnumKeysHaveValues: an enum key without its values would print no
// choices in --help and no enum in the schema.
func TestEnumKeysHaveValues(t *testing.T) {
	keys := append(ClientKeys(), keysOf(serviceSettings(), nil)...)
	for _, k := range keys {
		if (k.Kind == KindEnum) != (len(k.Values) > 0) {
			t.Errorf("%s: kind %s with values %v", k.Name, k.Kind, k.Values)
		}
	}
}
