package wire

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// A listing of the whole registry is tens of thousands of endpoints whose cluster,
// service, protocol and node repeat. protobuf's generated decoder allocates a
// message and a string per field for each of them, and converting to
// endpoint.Endpoint copies again; decoding the wire form directly, with repeated
// strings shared and the addresses cut from one string, allocates a few times per
// listing, not per endpoint.

// Field numbers of switchboard.registrar.v1.ListAllEndpointsResponse.
const (
	ListFieldEndpoints protowire.Number = 1
	ListFieldVersion   protowire.Number = 2
)

// parallelFrom is the listing size from which DecodeListing splits the work
// between goroutines: below it, starting them costs more than it saves.
const parallelFrom = 4096

// DecodeListing decodes a ListAllEndpointsResponse. A large one is decoded in
// parts at once, one per core (up to four), each part into its own range of the
// result: the client decodes while nothing else is left to do for the call.
func DecodeListing(b []byte) ([]endpoint.Endpoint, string, error) {
	n := CountFields(b, ListFieldEndpoints)
	eps := make([]endpoint.Endpoint, n)
	parts := splitListing(b, n, min(runtime.GOMAXPROCS(0), 4))
	var wg sync.WaitGroup
	for i := range parts {
		p := &parts[i]
		if i == len(parts)-1 {
			p.decode(eps) // on this goroutine
			continue
		}
		wg.Go(func() { p.decode(eps) })
	}
	wg.Wait()
	version := ""
	for _, p := range parts {
		if p.err != nil {
			return nil, "", fmt.Errorf("list response: %w", p.err)
		}
		if p.hasVersion { // protobuf keeps the last one
			version = p.version
		}
	}
	return eps, version, nil
}

// listingPart is a run of a listing's top-level fields and what decoding it found.
type listingPart struct {
	b          []byte
	first      int // the index of its first endpoint in the listing
	version    string
	hasVersion bool
	err        error
}

// splitListing cuts b, which holds n endpoints, into up to parts runs of fields
// holding about as many endpoints each: part k starts at endpoint k*n/parts.
func splitListing(b []byte, n, parts int) []listingPart {
	if n < parallelFrom || parts < 2 {
		return []listingPart{{b: b}}
	}
	out := make([]listingPart, 0, parts)
	start, seen, rest := 0, 0, b
	for len(rest) > 0 && len(out) < parts-1 {
		num, typ, _, next, err := NextField(rest)
		if err != nil {
			break // the last part meets the error and reports it
		}
		if num == ListFieldEndpoints && typ == protowire.BytesType {
			if seen == (len(out)+1)*n/parts {
				at := len(b) - len(rest)
				out = append(out, listingPart{b: b[start:at], first: len(out) * n / parts})
				start = at
			}
			seen++
		}
		rest = next
	}
	return append(out, listingPart{b: b[start:], first: len(out) * n / parts})
}

// decode decodes p's fields into eps from p.first on, with a decoder of its own
// (decoders are not safe for concurrent use).
func (p *listingPart) decode(eps []endpoint.Endpoint) {
	d := getWireDecoder(len(p.b))
	defer d.release()
	i, b := p.first, p.b
	for len(b) > 0 {
		num, typ, v, rest, err := NextField(b)
		if err != nil {
			p.err = err
			return
		}
		b = rest
		switch {
		case num == ListFieldEndpoints && typ == protowire.BytesType:
			if err = d.endpoint(&eps[i], v); err != nil {
				p.err = fmt.Errorf("endpoint %d: %w", i, err)
				return
			}
			i++
		case num == ListFieldVersion && typ == protowire.BytesType:
			if !utf8.Valid(v) {
				p.err = errors.New("version is not valid UTF-8")
				return
			}
			p.version, p.hasVersion = string(v), true
		}
	}
	d.addresses(eps[p.first:i])
}
