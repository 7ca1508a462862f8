package view

import (
	"maps"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/wire"
	"github.com/switchboard-mesh/switchboard/registrar/token"
)

// listing is a ListAllEndpoints response in wire form, sorted as every List is.
// The unfiltered one is built once per version and shared by every caller, so a
// read of the whole snapshot costs a copy, not a sort and a marshal per call.
type listing struct {
	at  token.Version
	raw []byte
}

// ListAll returns the ListAllEndpointsResponse for f in wire form: the endpoints'
// pre-encoded forms, sorted, and the version. The bytes are shared: callers only
// read them.
func (s *View) ListAll(f endpoint.Filter) []byte {
	f = f.Normalize()
	all := f == endpoint.Filter{}
	if all {
		s.listMu.Lock()
		defer s.listMu.Unlock()
	}
	s.mu.RLock()
	if all && s.listed != nil && s.listed.at.Seq == s.seq {
		l := s.listed
		s.mu.RUnlock()
		return l.raw
	}
	src, n := maps.Values(s.entries), len(s.entries)
	if !endpoint.Any(f.Service) { // a scoped client's read of one service
		m := s.byService[f.Service]
		src, n = maps.Keys(m), len(m)
	}
	eps, wires, size := make([]endpoint.Endpoint, 0, n), make([][]byte, 0, n), 0
	for e := range src {
		if f.Match(e.ep) {
			eps = append(eps, e.ep)
			wires = append(wires, e.wire)
			size += protowire.SizeTag(wire.ListFieldEndpoints) + protowire.SizeBytes(len(e.wire))
		}
	}
	l := &listing{at: s.current()}
	s.mu.RUnlock()
	l.raw = make([]byte, 0, size+64)
	for _, i := range endpoint.Order(eps) {
		l.raw = protowire.AppendTag(l.raw, wire.ListFieldEndpoints, protowire.BytesType)
		l.raw = protowire.AppendBytes(l.raw, wires[i])
	}
	l.raw = protowire.AppendTag(l.raw, wire.ListFieldVersion, protowire.BytesType)
	l.raw = protowire.AppendString(l.raw, l.at.String())
	if all {
		s.listed = l
	}
	return l.raw
}
