package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// duplicateKey returns the first name that appears twice in one JSON
// object of body, at any depth. encoding/json keeps the last of duplicate
// names silently; a proxy in front of the API that reads the first would
// then judge a different request than the one the API carries out, so
// decode refuses them. Malformed JSON is left to the decoder's own error:
// duplicateKey reports none then.
func duplicateKey(body []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	// One frame per open object or array; an object's frame holds the
	// names seen in it and whether the next string token is a name.
	type frame struct {
		names  map[string]bool // nil for an array
		expect bool            // the next token is a name
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) || err != nil {
			return "", false
		}
		top := len(stack) - 1
		if top >= 0 && stack[top].names != nil && stack[top].expect {
			if name, ok := tok.(string); ok {
				if stack[top].names[name] {
					return name, true
				}
				stack[top].names[name] = true
				stack[top].expect = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{names: map[string]bool{}, expect: true})
			continue
		case json.Delim('['):
			stack = append(stack, frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:top]
		}
		// A value ended: the enclosing object expects a name next.
		if n := len(stack) - 1; n >= 0 && stack[n].names != nil {
			stack[n].expect = true
		}
	}
}
