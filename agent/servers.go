package agent

import "context"

// Server is an Output that answers clients itself instead of writing a file: the xDS
// server (package xds) and the DNS server (package dns). Run feeds it the mirrored
// endpoints like every Output, after the registry was first mirrored completely, and
// runs Serve beside it until ctx ends.
type Server interface {
	Output
	// Serve answers clients until ctx ends, then stops gracefully and returns nil; an
	// error means the server could not serve (a closed listener, say).
	Serve(ctx context.Context) error
}

// Demander is implemented by a consumer that knows which services it needs, so that
// the registry view behind it can be narrowed to them (a registrar client that
// watches only the services its proxies asked for).
type Demander interface {
	// Demand returns the names of the services needed, sorted; all reports that every
	// service is needed (a wildcard subscription, or a consumer such as DNS that
	// cannot know its questions in advance), and then services is nil.
	Demand() (services []string, all bool)
	// DemandChanged receives a value after Demand's answer may have changed.
	DemandChanged() <-chan struct{}
}
