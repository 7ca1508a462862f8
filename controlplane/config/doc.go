// Package config parses the control plane's YAML configuration file, exactly the
// sections docs/controlplane.md ("Configuration") describes: tracing,
// northbound, southbound, database, topology, registration_auth and reconciler.
//
// Parsing is strict. Every unknown key, wrong type and invalid value is reported as a
// *FieldError carrying the path of the offending key, for example
//
//	reconciler.base_retry_delay: "abc" is not a duration
//
// A present, non-empty topology section selects config mode; an absent, null or empty
// one ("topology: {}") selects API mode.
//
// Beyond the spec's reference, registration_auth takes max_token_age (shared_secret: how
// old a token may be, default 5m) and audience (spire: the JWT-SVID audience, default
// "switchboard-controlplane"), and tls takes cert_file, key_file and ca_file (mTLS when ca_file is set).
package config
