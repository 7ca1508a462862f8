// Package dns answers DNS questions from the agent's view of the registry, so that
// anything with a resolver finds Switchboard's endpoints without another discovery
// daemon: A and AAAA records for SERVICE.CLUSTER.DOMAIN and SERVICE.DOMAIN, SRV
// records for _SERVICE._PROTOCOL.DOMAIN and _SERVICE._PROTOCOL.CLUSTER.DOMAIN, over
// UDP and TCP, built on github.com/miekg/dns.
//
// Answers come from the local view only; names outside the domain are refused unless
// an upstream resolver is configured. docs/discovery.md describes the names, the
// mapping of priority and weight, and the negative answers.
package dns
