package view

import "github.com/switchboard-mesh/switchboard/endpoint"

func ep(cluster, service, addr string, port int) endpoint.Endpoint {
	return endpoint.Endpoint{Cluster: cluster, Service: service, Protocol: "http", Address: addr, Port: port, Priority: 1}
}
