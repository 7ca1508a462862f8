// Package registry defines the interface every endpoint store implements — memory,
// JetStream, etcd, DynamoDB, Cloud Map and the registrar client — and opens one by name
// in the style of database/sql: a backend package registers itself in init, and
// programs import it for that side effect.
package registry
