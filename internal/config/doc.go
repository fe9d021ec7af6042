// Package config owns the configuration machinery of aperio-server and
// aperio-client: the key names and their yaml, environment and flag
// spellings, the loaders that layer those surfaces per field and remember
// where each value came from, validation that reports every problem at once,
// and the --print-config rendering; and the client's settings, defaults and
// loader. The server's key table (config/serverconfig) is built from the
// exported Setting constructors and loaded with LoadTable, since it binds
// to server.Config, which the client must not link.
//
// Every setting has a canonical key as the contract spells it (port,
// server.token, scaling_allow_http, health.interval). Keys compare after
// normalization: lowercase, with "." and "-" turned into "_". Nested yaml
// maps flatten by joining with "_", and a group's "enabled" child is the
// group's own switch, so this block
//
//	scaling: {enabled: true, allow_http: true}
//
// sets the same two settings as
//
//	scaling: true
//	scaling_allow_http: true
//
// The environment spelling is APERIO_ followed by the uppercase normalized key
// (APERIO_SCALING_ALLOW_HTTP); the client's flag is the normalized key with
// "_" turned into "-" (--scaling-cold-start). Lists are comma-separated in
// the environment and in flags.
//
// Only cmd/ calls the loaders: the environment, the files and the flags are
// passed in (TableOptions, ClientOptions), so loading has no side effects
// and tests never touch the real environment.
package config
