package main

import (
	"context"
	"fmt"
	"sort"
	"time"

	"google.golang.org/grpc"

	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
)

// listAll times ListAllEndpoints of the whole snapshot as an ordinary client sees
// it: request, response on the wire, decoded into messages. The registrar serves
// it from a listing encoded once per version, so the time is mostly transfer and
// the client's decoding; the anchor is another registrar measured the same way.
func listAll(ctx context.Context, e *env, o options) ([]result, error) {
	srv, stop, err := e.preloaded(ctx, "list", o.endpoints)
	if err != nil {
		return nil, err
	}
	defer stop()
	conns, err := dialN(srv.Addr().String(), 1)
	if err != nil {
		return nil, err
	}
	defer closeAll(conns)
	api := registrarv1.NewRegistrarClient(conns[0])
	call := func() (time.Duration, error) {
		start := time.Now()
		resp, err := api.ListAllEndpoints(ctx, &registrarv1.ListAllEndpointsRequest{}, grpc.MaxCallRecvMsgSize(1<<30))
		took := time.Since(start)
		if err == nil && len(resp.GetEndpoints()) != o.endpoints {
			err = fmt.Errorf("ListAllEndpoints returned %d endpoints, want %d", len(resp.GetEndpoints()), o.endpoints)
		}
		return took, err
	}
	for range 5 { // warm up: connection, listing, allocator
		if _, err := call(); err != nil {
			return nil, err
		}
	}
	times := make([]time.Duration, 0, 200)
	for range 200 {
		d, err := call()
		if err != nil {
			return nil, err
		}
		times = append(times, d)
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	p50, p99 := times[len(times)/2], times[len(times)*99/100]
	const anchor = 7600 * time.Microsecond // the other registrar's p50 at 10k, same method
	return []result{{scenario: "ListAllEndpoints of the whole snapshot, decoded, p50 / p99",
		setup: fmt.Sprintf("%d endpoints", o.endpoints), value: ms(p50) + " / " + ms(p99),
		goal: "p50 ≤ 3.8 ms (0.5× anchor)", anchor: "7.6 ms (p50)", ok: ptr(o.endpoints != 10000 || p50 <= anchor/2)}}, nil
}
