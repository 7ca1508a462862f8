// Package cloudmap stores endpoints in AWS Cloud Map (servicediscovery), one of the
// external registries a registrar can sit in front of (docs/backends.md, "cloudmap").
// It registers itself as the "cloudmap" registry backend; like every backend it is a
// driver behind a registry.Front, which holds the rules every backend shares.
//
// # Mapping
//
//   - Namespace: one Cloud Map namespace holds every endpoint (cloudmap-namespace, a
//     name or an ns- id). With cloudmap-create-namespace it is created as an HTTP
//     namespace when missing; an existing private DNS namespace works too.
//   - Service: one Cloud Map service per endpoint service name, created on demand
//     with Type HTTP (API-only, no DNS records) and its id cached. Cluster and protocol
//     are instance attributes, so all clusters' instances of a service share one Cloud
//     Map service, the way multi-cluster discovery over a shared namespace expects.
//     Names that Cloud Map would reject (longer than 63 characters, or ending in '-')
//     are stored as "<prefix>.<fnv64 hex>": endpoint names cannot contain '.', so a
//     mapped name never equals a real one.
//   - Instance: id = endpoint.InstanceID(); attributes AWS_INSTANCE_IPV4 or
//     AWS_INSTANCE_IPV6, AWS_INSTANCE_PORT (omitted for port 0), and ours: cluster,
//     service, protocol, node, priority, weight, ttl, expiry, region, zone, health
//     (each omitted when empty, health when healthy), and annotations as JSON (split
//     over annotations, annotations.1, … because a value holds at most 1,024
//     characters). Health is ours, read liberally (missing: healthy; a state this
//     release does not know: unhealthy); Cloud Map's own health status is neither set
//     nor read: it needs a custom health check configured when the Cloud Map service is
//     created, which services created before would lack. Reads trust the attributes, not the Cloud Map service name, and skip
//     instances that do not decode to a valid endpoint with a matching id (instances
//     other tools registered in the same namespace).
//
// # Writes
//
// Apply gets the batch validated and coalesced (by the Front), encodes every
// registration (an endpoint whose attributes exceed Cloud Map's 5,000-character limit
// fails the whole batch before anything is sent, as endpoint.ErrInvalid naming
// "annotations"), then sends RegisterInstance / DeregisterInstance concurrently. Both
// are asynchronous in Cloud Map: each returns an operation id, which is polled with
// GetOperation (backing off from 20ms to 1s) until SUCCESS or FAIL, bounded by
// cloudmap-operation-timeout. Keys whose operation failed, timed out or could not be
// submitted are reported in one *registry.ApplyError; the rest of the batch is written.
// A batch is therefore not atomic. Transient failures (throttling, 5xx, network, an
// operation still pending at the timeout, FAIL with INTERNAL_FAILURE or
// THROTTLED_REQUEST) also match registry.ErrUnavailable. Deregistering an instance
// Cloud Map does not know is not an error.
//
// # Reads
//
// List uses ListInstances with paging (per service, concurrently when the filter has
// no service), and filters cluster, protocol and address client-side. DiscoverInstances
// is not used: it has no NextToken, so a service larger than one MaxResults answer
// would be cut short silently; it filters by health status; and the SDK sends it to a
// "data-" prefixed host, which breaks custom endpoints.
//
// # TTL
//
// Cloud Map has no TTL. A registration with a TTL stores expiry = writer's clock +
// TTL (unix milliseconds), refreshed by each re-registration. Reads drop instances
// whose expiry has passed, so an expired endpoint is never listed, and hand them to a
// background reaper that deregisters them lazily: it re-reads the instance with
// GetInstance first and skips it if it was refreshed or if this process is writing it
// right now. A refresh by another process that lands between that re-read and the
// deregistration can still be lost; it reappears on the next refresh, which TTL users
// send anyway. Expiry depends on writers' and readers' clocks agreeing (NTP).
//
// # Watch
//
// Cloud Map has no change feed this backend can use: Watch fails with
// registry.ErrNoWatch, and the registrar polls it.
package cloudmap
