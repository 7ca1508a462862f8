package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// The fleet's shape is a pure function of a few numbers, so the parent and every
// agents process agree on which endpoints exist without telling each other.

// services is how many services a cluster's endpoints are spread over.
const services = 10

// probeService holds one endpoint per cluster that the propagation phase changes;
// its writes are the only ones that change an entry.
const probeService = "probe"

func clusterName(i int) string { return "c" + strconv.Itoa(i+1) }

// fleetEndpoint is endpoint i of cluster c, held by agent i/perAgent.
func fleetEndpoint(c, i, perAgent int, ttl time.Duration) endpoint.Endpoint {
	return endpoint.Endpoint{
		Cluster: clusterName(c), Service: serviceName(c, i%services), Protocol: "http",
		Address: fmt.Sprintf("10.%d.%d.%d", (i>>16)&255, (i>>8)&255, i&255), Port: 8080,
		Node: fmt.Sprintf("node-%d", i/perAgent), Priority: 1, TTL: endpoint.TTL(ttl),
	}
}

// serviceName is cluster c's service s (of services).
func serviceName(c, s int) string { return fmt.Sprintf("%s-app%d", clusterName(c), s) }

// probeEndpoint is cluster c's probe entry, carrying change id.
func probeEndpoint(c int, id string, ttl time.Duration) endpoint.Endpoint {
	return endpoint.Endpoint{
		Cluster: clusterName(c), Service: probeService, Protocol: "http", Address: "192.0.2.1", Port: 8080,
		Node: "prober", Priority: 1, TTL: endpoint.TTL(ttl), Annotations: map[string]string{"change": id},
	}
}

// expectedKeys are the keys of cluster c's fleet endpoints.
func expectedKeys(c, n, perAgent int) []string {
	keys := make([]string, n)
	for i := range n {
		keys[i] = fleetEndpoint(c, i, perAgent, 0).Key().String()
	}
	return keys
}
