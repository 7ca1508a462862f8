// Package dynamodb is the registry backend that stores endpoints in an Amazon DynamoDB
// table, for registrars that share state across clusters (docs/backends.md,
// "dynamodb"). It registers itself as the "dynamodb" backend; like every backend it is
// a driver behind a registry.Front. DynamoDB has no change feed this backend could
// follow (Streams are not used), so Watch fails with registry.ErrNoWatch: the
// registrar polls it. It can hold (registry.Holder): a hold is a heartbeat item its
// writer renews every ttl/3, entries registered under it name it as their owner
// instead of expiring, and readers drop the entries of an owner whose heartbeat has
// expired (docs/backends.md, "Holds").
//
// # Table schema
//
// One item per endpoint. Names (cluster, service, protocol) never contain '#', and
// neither do addresses or decimal ports, so '#' separates key parts unambiguously.
//
//	pk          S  partition key: service
//	sk          S  sort key: cluster#protocol#address#port
//	cluster     S  hash key of the GSI "cluster-index"
//	csk         S  range key of the GSI: protocol#service#address#port
//	service, protocol, address  S;  port, priority, weight  N
//	node        S  omitted when empty
//	annotations M  of S; omitted when empty
//	ttl         S  the endpoint's TTL in its text form ("30s", "never"); omitted when unset
//	region, zone  S  omitted when empty
//	health      S  "unhealthy" or "draining"; omitted when healthy. Read liberally: a
//	               missing one is healthy, one this release does not know is unhealthy
//	expires_at  N  epoch seconds, the table's DynamoDB TTL attribute, rounded up so
//	               DynamoDB never deletes an item before it has expired for readers
//	expires_ms  N  epoch milliseconds, what reads compare against
//	owner       S  on an entry under a hold only, which then has no expires_at or
//	               expires_ms: the hold incarnation whose heartbeat keeps it alive
//
// A hold's heartbeat is an item of its own: pk "#hold" (never a service name, so
// never an endpoint's partition), sk the owner value, expires_ms and expires_at. It
// has no cluster, so the GSI never holds it; scans skip it.
//
// Billing is on demand; the GSI projects all attributes. With dynamodb-create-table the
// backend creates the table in this shape (it waits for ACTIVE by polling DescribeTable,
// treating a missing status, as local emulators report, as ready) and enables TTL on
// expires_at. Without it, a missing table or one keyed differently is an error at open.
//
// # Access patterns
//
// Filters with "*" or "" are wildcards. Every read also filters out expired items
// (expires_ms <= now) on the server, because DynamoDB deletes expired items lazily,
// hours or days after they expire, and checks again on the client.
//
//	service set            Query pk = service, strongly consistent. Cluster, then
//	                       protocol, then address narrow it with begins_with(sk, …)
//	                       as far as they are set from the left; the rest are filters.
//	                       This is the common lookup: agents and the registrar ask for
//	                       one service across clusters.
//	cluster set, no service  Query the GSI cluster = cluster, with begins_with(csk,
//	                       protocol#) when the protocol is set. GSI reads are
//	                       eventually consistent on AWS (usually well under a second).
//	                       If the table has no ACTIVE cluster-index, a Scan with filters.
//	otherwise              a paginated, strongly consistent Scan with filters on the set
//	                       fields: listing everything (the registrar's poll), or by
//	                       protocol or address alone, which nothing in Switchboard asks.
//
// The registry.Front sorts the results, on the client. Items that do not decode into
// a valid endpoint (written by something else) are skipped with a warning rather than
// failing every poll.
//
// # Writes
//
// Apply gets the batch validated and coalesced to one op per key by the Front (a
// transaction may not touch an item twice) and writes it with TransactWriteItems — a
// Put per registration, a Delete per unregistration — in chunks of at most 100 items
// and about 4 MB. Each chunk is atomic; chunks are written in order, and on failure the
// *registry.ApplyError names every key of the failed chunk and of the chunks after it,
// and why each cancelled item failed.
//
// # Retries
//
// Every request — reads and writes — is retried by the SDK on throttling, 5xx answers
// and connection errors, and transactions are also retried when cancelled only for
// conflicts or throttling; backoff is capped exponential with full jitter, 5 attempts
// by default. A read or write that still fails matches registry.ErrUnavailable, so the
// registrar can queue and retry it later; other failures (validation, a conditional
// cancellation, a missing table) do not. Retries reuse the transaction's client
// token, so a retried chunk is applied once.
//
// Expiry times come from the writer's clock and are compared with the reader's, so the
// hosts' clocks must agree to well within the shortest TTL.
//
// Credentials come from the standard AWS chain (environment, shared files, SSO, instance
// or task roles) unless Config.Credentials is set.
package dynamodb
