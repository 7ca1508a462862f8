package jetstream

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// Another writer (CCM) keeps an IPv6 address as it was given — 2001:DB8::1,
// 2001:0db8:0:0::1 — in the payload, in the subject's address token and in the id
// token, which hashes the address as written. Readers show such an entry under its
// canonical key (validButAnnotations, Subjects.holds), so an unregister of that key
// has to clear the subject it was written on, which neither the key nor Forms names:
// the spelling is the writer's. Before the removals of a batch, the backend therefore
// lists the subjects of each service an IPv6 unregister names — names only, from the
// stream leader's per-subject index (stream info with a subjects filter), so a
// process that has read nothing (switchboard registry unregister) finds them too —
// and removes each subject that spells the key's address otherwise
// (Subjects.OtherSpelling). An IPv4 address has one spelling: its unregisters read
// nothing more.

// otherSpellings returns, by op index, the subjects on which another writer stored
// the key of an IPv6 unregister of ops under another spelling of its address. An
// unregister whose service could not be listed is failed in b: it cannot say the
// entry is gone.
func (r *driver) otherSpellings(b *batch, ops []registry.Op) map[int][]string {
	scopes := map[string][]int{} // a service's subject filter: the unregisters in it
	for i, op := range ops {
		if op.Kind != registry.OpUnregister || op.Hold != "" || b.errs[i] != nil || !strings.Contains(op.Endpoint.Address, ":") {
			continue
		}
		k := op.Endpoint.Key()
		f := r.subj.Filter(endpoint.Filter{Cluster: k.Cluster, Protocol: k.Protocol, Service: k.Service})
		scopes[f] = append(scopes[f], i)
	}
	if len(scopes) == 0 {
		return nil
	}
	type listing struct {
		byAddr map[string][]string // Subjects.spelledOtherwise
		err    error
	}
	found := make(map[string]*listing, len(scopes))
	sem := make(chan struct{}, maxSizingRequests)
	var wg sync.WaitGroup
	for f := range scopes {
		l := &listing{}
		found[f] = l
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var held map[string]uint64
			if held, l.err = r.subjectsIn(b.ctx, f); l.err == nil {
				l.byAddr = r.subj.spelledOtherwise(held)
			}
		})
	}
	wg.Wait()
	out := map[int][]string{}
	for f, idx := range scopes {
		l := found[f]
		for _, i := range idx {
			k := ops[i].Endpoint.Key()
			if l.err != nil {
				b.fail(i, fmt.Errorf("list %s to find %s under another spelling of its address: %w", f, k, l.err))
				continue
			}
			for _, subject := range l.byAddr[k.Address] {
				if r.subj.OtherSpelling(subject, k) {
					out[i] = append(out[i], subject)
				}
			}
		}
	}
	return out
}

// spelledOtherwise picks, from the subjects of a listing, those whose address token
// spells an IPv6 address otherwise than this backend does, by canonical address. Most
// tokens are told apart without parsing: an IPv4 address has no ':' or '-'.
func (s Subjects) spelledOtherwise(subjects map[string]uint64) map[string][]string {
	var out map[string][]string
	for subject := range subjects {
		tok, ok := s.addressTokenOf(subject)
		if !ok || !strings.ContainsAny(tok, ":-") {
			continue
		}
		written, a, err := decodeAddressToken(tok)
		if err != nil || sameAddress(a, written) {
			continue
		}
		if out == nil {
			out = map[string][]string{}
		}
		canon := a.String()
		out[canon] = append(out[canon], subject)
	}
	return out
}

// subjectsIn lists the subjects matching filter that hold a message (an entry or a
// removal) with their message counts, as the stream leader's per-subject index has
// them: stream info with a subjects filter, which sends names and no messages, in
// pages of the server's size (100,000).
func (r *driver) subjectsIn(ctx context.Context, filter string) (map[string]uint64, error) {
	out := map[string]uint64{}
	for {
		req, _ := json.Marshal(struct {
			Offset int    `json:"offset,omitempty"`
			Filter string `json:"subjects_filter"`
		}{len(out), filter})
		rctx, cancel := context.WithTimeout(ctx, ackTimeout)
		reply, err := r.nc.RequestWithContext(rctx, jetstream.DefaultAPIPrefix+"STREAM.INFO."+r.cfg.Name, req)
		cancel()
		if err != nil {
			return nil, err
		}
		var resp struct {
			Error *jetstream.APIError `json:"error"`
			Total int                 `json:"total"`
			State *struct {
				Subjects map[string]uint64 `json:"subjects"`
			} `json:"state"`
		}
		if err := json.Unmarshal(reply.Data, &resp); err != nil {
			return nil, fmt.Errorf("stream info response: %w", err)
		}
		switch {
		case resp.Error != nil:
			return nil, resp.Error
		case resp.State == nil:
			return nil, jetstream.ErrInvalidJetStreamResponse
		}
		before := len(out)
		for subject, n := range resp.State.Subjects {
			out[subject] = n
		}
		// A page that adds nothing ends the listing: subjects that went between
		// pages shift the rest down, and those may be missed, like any subject
		// written after the listing.
		if len(out) == before || len(out) >= resp.Total {
			return out, nil
		}
	}
}
