package view

import "google.golang.org/grpc/mem"

// sendForm is a Config with the hooks the registrar attaches (registrar/fanout.go),
// in the same shapes and allocations: a benchmark of the view then measures what
// the registrar pays. Only tests import gRPC here; the package does not.
func sendForm(cfg Config) Config {
	type message struct {
		data mem.BufferSlice
		raw  []byte
	}
	cfg.WrapEvent = func(msg []byte) any { return &message{data: mem.BufferSlice{mem.SliceBuffer(msg)}, raw: msg} }
	cfg.WrapPart = func(part []byte) any { return mem.Buffer(mem.SliceBuffer(part)) }
	cfg.WrapSnapshot = func(snap *Snapshot) any {
		bufs := make(mem.BufferSlice, 0, snap.PartCount())
		msgs := make([]message, snap.Len())
		for i := range msgs {
			start := len(bufs)
			snap.Parts(i, func(p *Part) { bufs = append(bufs, p.Out.(mem.Buffer)) })
			msgs[i].data = bufs[start:len(bufs):len(bufs)]
		}
		return msgs
	}
	return cfg
}
