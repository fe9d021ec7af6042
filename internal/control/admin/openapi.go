package admin

import _ "embed"

// openAPIDoc is the OpenAPI 3.0 description of every route, served at
// GET /openapi.json. openapi_test.go checks it against the router.
//
//go:embed openapi.json
var openAPIDoc []byte
