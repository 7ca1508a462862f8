package agent

import (
	"hash/maphash"

	"github.com/switchboard-mesh/switchboard/agent/render"
)

// refuser is an output that leaves endpoints out rather than write a value that could
// change the structure of its file (render.Output).
type refuser interface {
	Refused() []render.Refusal
}

// maxWarned bounds the values remembered as logged; past it the memory starts over,
// so a value refused again is logged again, at most once per that many others.
const maxWarned = 4096

// warnedSet remembers which refused values were logged, by a hash of the output,
// endpoint, field and value: a value refused on every rendering is logged once.
type warnedSet struct {
	seed maphash.Seed
	seen map[uint64]struct{}
}

func newWarnedSet() *warnedSet {
	return &warnedSet{seed: maphash.MakeSeed(), seen: map[uint64]struct{}{}}
}

// first reports whether r, refused by output, is seen for the first time.
func (w *warnedSet) first(output string, r render.Refusal) bool {
	var h maphash.Hash
	h.SetSeed(w.seed)
	for _, s := range [...]string{output, r.Endpoint.String(), r.Field, r.Value} {
		h.WriteString(s)
		h.WriteByte(0)
	}
	sum := h.Sum64()
	if _, ok := w.seen[sum]; ok {
		return false
	}
	if len(w.seen) >= maxWarned {
		clear(w.seen)
	}
	w.seen[sum] = struct{}{}
	return true
}

// reportRefused counts the values o's last update refused, and logs each the first
// time it is seen.
func (d *Discovery) reportRefused(o Output) {
	r, ok := o.(refuser)
	if !ok {
		return
	}
	refused := r.Refused()
	d.opts.Metrics.refusedValues(o.Name(), len(refused))
	for _, x := range refused {
		if d.warned.first(o.Name(), x) {
			d.log.Warn("endpoint left out of a rendered file: a value the template would print holds control characters (use raw in the template to write it as stored, or an escaping helper)",
				"output", o.Name(), "endpoint", x.Endpoint.String(), "field", x.Field, "value", clip(x.Value))
		}
	}
}

// clip shortens a value for the log; the log's handler quotes what it holds.
func clip(s string) string {
	const max = 128
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}
