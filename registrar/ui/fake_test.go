package ui

import (
	"maps"
	"slices"
	"sync"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registrar/inspect"
)

// fakeSource is a registrar as the page sees it: endpoints, a log of changes of
// which the last keep are still "in the ring", and a status.
type fakeSource struct {
	mu     sync.Mutex
	eps    map[endpoint.Key]endpoint.Endpoint
	log    []inspect.Change // log[i] is version i+1
	keep   int
	status inspect.Status
}

func newFake(keep int) *fakeSource {
	return &fakeSource{eps: map[endpoint.Key]endpoint.Endpoint{}, keep: keep, status: inspect.Status{Cluster: "east", Ready: true}}
}

func (f *fakeSource) set(es ...endpoint.Endpoint) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range es {
		t := inspect.Added
		if _, ok := f.eps[e.Key()]; ok {
			t = inspect.Updated
		}
		f.eps[e.Key()] = e
		f.log = append(f.log, inspect.Change{Type: t, Endpoint: e, Version: uint64(len(f.log) + 1)})
	}
}

func (f *fakeSource) remove(k endpoint.Key) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.eps[k]
	if !ok {
		return
	}
	delete(f.eps, k)
	f.log = append(f.log, inspect.Change{Type: inspect.Removed, Endpoint: e, Version: uint64(len(f.log) + 1)})
}

func (f *fakeSource) setStatus(st inspect.Status) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status = st
}

func (f *fakeSource) Changes(after uint64, max int) ([]inspect.Change, uint64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := uint64(len(f.log))
	if after > n || n-after > uint64(f.keep) {
		return nil, after, false
	}
	end := min(n, after+uint64(max))
	return slices.Clone(f.log[after:end]), end, true
}

func (f *fakeSource) Endpoints() ([]endpoint.Endpoint, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Collect(maps.Values(f.eps)), uint64(len(f.log))
}

func (f *fakeSource) Status() inspect.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.status
	st.Version = uint64(len(f.log))
	return st
}
