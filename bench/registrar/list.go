package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/registrar/client"
)

// listAll times ListAllEndpoints of the whole snapshot as an ordinary client sees
// it: request, response on the wire, decoded into messages. The registrar serves
// it from a listing encoded once per version, so the time is mostly transfer and
// the client's decoding. The client is a process of its own (-role lister), as
// a user's is: in the registrar's process its garbage would be collected with
// the registrar's heap and its decoding would find the registrar's threads awake.
func listAll(ctx context.Context, e *env, o options) ([]result, error) {
	srv, stop, err := e.preloaded(ctx, "list", o.endpoints)
	if err != nil {
		return nil, err
	}
	defer stop()
	var out []int64
	args := []string{"-role", "lister", "-target", srv.Addr().String(), "-endpoints", strconv.Itoa(o.endpoints)}
	if err := runChild(ctx, args, func() error { return nil }, &out); err != nil {
		return nil, err
	}
	if len(out) != 6 {
		return nil, fmt.Errorf("lister printed %d numbers, want 6", len(out))
	}
	d := func(i int) time.Duration { return time.Duration(out[i]) }
	const anchor = 7600 * time.Microsecond // the other registrar's p50 at 10k, generated client
	setup := fmt.Sprintf("%d endpoints, client in its own process", o.endpoints)
	met := func(p50 time.Duration) *bool { return ptr(o.endpoints != 10000 || p50 <= anchor/2) }
	return []result{
		{scenario: "ListAllEndpoints of the whole snapshot, transfer alone (received, not decoded), p50 / p99",
			setup: setup, value: ms(d(0)) + " / " + ms(d(1))},
		{scenario: "ListAllEndpoints of the whole snapshot, generated client (protobuf messages), p50 / p99",
			setup: setup, value: ms(d(2)) + " / " + ms(d(3)),
			goal: "p50 ≤ 3.8 ms (0.5× anchor)", anchor: "7.6 ms (p50)", ok: met(d(2))},
		{scenario: "ListAllEndpoints of the whole snapshot, Switchboard's client (client.ListAll: decoded into endpoints), p50 / p99",
			setup: setup, value: ms(d(4)) + " / " + ms(d(5)),
			goal: "p50 ≤ 3.8 ms (0.5× anchor)", anchor: "7.6 ms (p50)", ok: met(d(4))},
	}, nil
}

// listerProcess is the list scenario's child: it lists target, which holds want
// endpoints, three ways in turns — undecoded, with the generated client and with
// client.ListAll — and prints each way's p50 and p99 in nanoseconds. Each way's
// latest listing stays referenced until its next, as a client uses what it listed:
// the heap it works with is a real client's, not an empty one's.
func listerProcess(target string, want int) error {
	conns, err := dialN(target, 1)
	if err != nil {
		return err
	}
	defer closeAll(conns)
	ctx := context.Background()
	api := registrarv1.NewRegistrarClient(conns[0])
	var (
		wire []byte
		resp *registrarv1.ListAllEndpointsResponse
		eps  []endpoint.Endpoint
	)
	undecoded := func() (n int, err error) {
		err = conns[0].Invoke(ctx, registrarv1.Registrar_ListAllEndpoints_FullMethodName, &registrarv1.ListAllEndpointsRequest{}, &wire, raw, grpc.MaxCallRecvMsgSize(1<<30))
		return countListed(wire), err
	}
	generated := func() (n int, err error) {
		resp, err = api.ListAllEndpoints(ctx, &registrarv1.ListAllEndpointsRequest{}, grpc.MaxCallRecvMsgSize(1<<30))
		return len(resp.GetEndpoints()), err
	}
	ours := func() (n int, err error) {
		eps, _, err = client.ListAll(ctx, conns[0], endpoint.Filter{}, grpc.MaxCallRecvMsgSize(1<<30))
		return len(eps), err
	}
	fmt.Println("ready")
	ps, err := timeListings(want, undecoded, generated, ours)
	if err != nil {
		return err
	}
	for _, p := range ps {
		fmt.Println(int64(p[0]))
		fmt.Println(int64(p[1]))
	}
	return nil
}

// countListed counts the endpoints (field 1) of an encoded ListAllEndpointsResponse
// without decoding them; -1 if it does not parse.
func countListed(b []byte) int {
	n := 0
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return -1
		}
		b = b[l:]
		if l = protowire.ConsumeFieldValue(num, typ, b); l < 0 {
			return -1
		}
		b = b[l:]
		if num == 1 {
			n++
		}
	}
	return n
}

// timeListings times ways of listing everything in turns, call by call, so that
// none pays more of another's garbage or of the machine's load; each call must
// return want endpoints. It returns each way's p50 and p99.
func timeListings(want int, calls ...func() (int, error)) ([][2]time.Duration, error) {
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
				return nil, err
			}
			if round >= 5 { // the first rounds warm up: connection, listing, allocator
				times[i] = append(times[i], took)
			}
		}
	}
	ps := make([][2]time.Duration, len(calls))
	for i, ts := range times {
		slices.Sort(ts)
		ps[i] = [2]time.Duration{ts[len(ts)/2], ts[len(ts)*99/100]}
	}
	return ps, nil
}
