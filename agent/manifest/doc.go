// Package manifest parses the agent's manifest: the endpoints a node registers while
// their health checks pass (register_when_stable; docs/agent.md, "The publish
// gate").
//
//	entries:
//	  - cluster: prod
//	    service: web
//	    protocol: http
//	    address: 10.0.0.2
//	    port: 8080
//	    ttl: 30s
//	    zone: eu-west-1a      # region and zone default to the agent's --region, --zone
//	    health: healthy       # or draining, unhealthy: set by hand
//	    annotations: {prometheus.io/scrape: "true"}
//	    checks:
//	      - http: http://127.0.0.1:8080/healthz
//	        interval: 5s
//	        rise: 2
//	        fall: 3
//
// Parsing is strict: an unknown key, a duplicate key or a value of the wrong type is
// an error naming the line, the entry index and the field, and every entry is
// normalised and validated by package endpoint before the manifest is accepted.
package manifest
