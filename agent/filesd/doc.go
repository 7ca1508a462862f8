// Package filesd turns endpoints into Prometheus file_sd target groups
// (docs/agent.md, "Prometheus file_sd").
//
// An endpoint is scraped when its service or protocol is "prometheus", or when it
// carries the annotation prometheus.io/scrape: "true"; any other value of that
// annotation excludes it. Endpoints without a port are skipped. Targets are grouped by
// cluster, service and protocol, which become labels, together with the annotations
// whose keys are valid Prometheus label names not starting with "__" (so an annotation
// can never set __address__ or __metrics_path__, and keys with dots or slashes, such
// as prometheus.io/scrape, are not labels).
package filesd
