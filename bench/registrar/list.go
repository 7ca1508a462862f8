package main

import (
	"context"
	"fmt"
	"sort"
	"time"

	"google.golang.org/grpc"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/registrar/client"
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
	generated := func() (int, error) {
		resp, err := api.ListAllEndpoints(ctx, &registrarv1.ListAllEndpointsRequest{}, grpc.MaxCallRecvMsgSize(1<<30))
		return len(resp.GetEndpoints()), err
	}
	ours := func() (int, error) {
		eps, _, err := client.ListAll(ctx, conns[0], endpoint.Filter{}, grpc.MaxCallRecvMsgSize(1<<30))
		return len(eps), err
	}
	gen, own, err := timeListings(o.endpoints, generated, ours)
	if err != nil {
		return nil, err
	}
	const anchor = 7600 * time.Microsecond // the other registrar's p50 at 10k, generated client
	setup := fmt.Sprintf("%d endpoints", o.endpoints)
	return []result{
		{scenario: "ListAllEndpoints of the whole snapshot, generated client (protobuf messages), p50 / p99",
			setup: setup, value: ms(gen[0]) + " / " + ms(gen[1]),
			goal: "p50 ≤ 3.8 ms (0.5× anchor)", anchor: "7.6 ms (p50)", ok: ptr(o.endpoints != 10000 || gen[0] <= anchor/2)},
		{scenario: "ListAllEndpoints of the whole snapshot, Switchboard's client (client.ListAll: decoded into endpoints), p50 / p99",
			setup: setup, value: ms(own[0]) + " / " + ms(own[1]),
			goal: "p50 ≤ 3.8 ms (0.5× anchor)", anchor: "7.6 ms (p50)", ok: ptr(o.endpoints != 10000 || own[0] <= anchor/2)},
	}, nil
}

// timeListings times two ways of listing everything in turns, call by call, so
// that neither pays more of the other's garbage or of the machine's load; each
// call must return want endpoints. It returns each way's p50 and p99.
func timeListings(want int, calls ...func() (int, error)) (gen, own [2]time.Duration, err error) {
	times := make([][]time.Duration, len(calls))
	for round := range 205 {
		for i, call := range calls {
			start := time.Now()
			n, err := call()
			took := time.Since(start)
			if err == nil && n != want {
				err = fmt.Errorf("ListAllEndpoints returned %d endpoints, want %d", n, want)
			}
			if err != nil {
				return gen, own, err
			}
			if round >= 5 { // the first rounds warm up: connection, listing, allocator
				times[i] = append(times[i], took)
			}
		}
	}
	pct := func(ts []time.Duration) [2]time.Duration {
		sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
		return [2]time.Duration{ts[len(ts)/2], ts[len(ts)*99/100]}
	}
	return pct(times[0]), pct(times[1]), nil
}
