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
		n := 0
		for _, m := range snap.Messages {
			n += len(m)
		}
		bufs := make(mem.BufferSlice, 0, n)
		msgs := make([]message, len(snap.Messages))
		for i, m := range snap.Messages {
			start := len(bufs)
			for _, p := range m {
				bufs = append(bufs, p.Out.(mem.Buffer))
			}
			msgs[i].data = bufs[start:len(bufs):len(bufs)]
		}
		return msgs
	}
	return cfg
}
