package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/internal/wire"
	"github.com/switchboard-mesh/switchboard/registrar/client"
)

// listAll times ListAllEndpoints of the whole snapshot as an ordinary client sees
// it: request, response on the wire, decoded. The registrar serves it from a
// listing encoded once per version, so the time is mostly transfer and the
// client's decoding. Each way of listing runs in a process of its own (-role
// lister), as a user's client does: in the registrar's process its garbage would
// be collected with the registrar's heap, and in one process shared by the three
// ways each would collect the others' listings too (the generated client's is tens
// of thousands of messages). A process lists back to back, as a client listing
// repeatedly does, and the ways take turns in blocks, so that none meets more of
// the machine's load than another. (Until 2026-12-02 the ways shared one process
// and took turns call by call: a call then also collected the generated client's
// listing, and ran while the previous call's collector was still at work.)
func listAll(ctx context.Context, e *env, o options) ([]result, error) {
	srv, stop, err := e.preloaded(ctx, "list", o.endpoints)
	if err != nil {
		return nil, err
	}
	defer stop()
	ps, err := timeListers(ctx, srv.Addr().String(), o.endpoints, listWays)
	if err != nil {
		return nil, err
	}
	const anchor = 7600 * time.Microsecond // the other registrar's p50 at 10k, generated client
	setup := fmt.Sprintf("%d endpoints, each way's client in a process of its own", o.endpoints)
	met := func(p50 time.Duration) *bool { return ptr(o.endpoints != 10000 || p50 <= anchor/2) }
	p := func(i int) string { return ms(ps[i][0]) + " / " + ms(ps[i][1]) }
	return []result{
		{scenario: "ListAllEndpoints of the whole snapshot, transfer alone (received, not decoded), p50 / p99",
			setup: setup, value: p(0)},
		{scenario: "ListAllEndpoints of the whole snapshot, generated client (protobuf messages), p50 / p99",
			setup: setup, value: p(1),
			goal: "p50 ≤ 3.8 ms (0.5× anchor)", anchor: "7.6 ms (p50)", ok: met(ps[1][0])},
		{scenario: "ListAllEndpoints of the whole snapshot, Switchboard's client (client.ListAll: decoded into endpoints), p50 / p99",
			setup: setup, value: p(2),
			goal: "p50 ≤ 3.8 ms (0.5× anchor)", anchor: "7.6 ms (p50)", ok: met(ps[2][0])},
	}, nil
}

// listWays are the ways of listing the list scenario times, in its rows' order.
var listWays = []string{"undecoded", "generated", "client"}

// timeListers starts a lister child per way and has them list target, which holds
// want endpoints, in turns of a block of calls each: first a block of 5 to warm up
// (connection, listing, allocator), then 4 blocks of 50 timed. It returns each
// way's p50 and p99.
func timeListers(ctx context.Context, target string, want int, ways []string) ([][2]time.Duration, error) {
	children := make([]*child, len(ways))
	defer func() {
		for _, c := range children {
			if c != nil {
				_ = c.wait()
			}
		}
	}()
	for i, way := range ways {
		profile := childProfile
		if profile != "" {
			profile += "." + way
		}
		args := []string{"-role", "lister", "-way", way, "-target", target, "-endpoints", strconv.Itoa(want)}
		c, err := startChild(ctx, args, profile)
		if err != nil {
			return nil, err
		}
		children[i] = c
	}
	times := make([][]time.Duration, len(ways))
	for block, calls := range []int{5, 50, 50, 50, 50} {
		for i, c := range children {
			took, err := c.list(calls)
			if err != nil {
				return nil, fmt.Errorf("lister %s: %w", ways[i], err)
			}
			if block > 0 {
				times[i] = append(times[i], took...)
			}
		}
	}
	ps := make([][2]time.Duration, len(ways))
	for i, ts := range times {
		slices.Sort(ts)
		ps[i] = [2]time.Duration{ts[len(ts)/2], ts[len(ts)*99/100]}
	}
	return ps, nil
}

// list has a lister child list n times back to back and returns how long each
// call took.
func (c *child) list(n int) ([]time.Duration, error) {
	if _, err := fmt.Fprintln(c.stdin, n); err != nil {
		return nil, err
	}
	took := make([]time.Duration, n)
	for i := range took {
		if !c.lines.Scan() {
			return nil, fmt.Errorf("no answer: %v", c.lines.Err())
		}
		ns, err := strconv.ParseInt(c.lines.Text(), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("answer %q", c.lines.Text())
		}
		took[i] = time.Duration(ns)
	}
	return took, nil
}

// listerProcess is the list scenario's child: it lists target, which holds want
// endpoints, one way (undecoded, generated or client), as many times back to back
// as each line it reads says, and prints each call's time in nanoseconds. Its
// latest listing stays referenced until its next, as a client uses what it listed:
// the heap it works with is a real client's, not an empty one's.
func listerProcess(target string, want int, way string) error {
	conns, err := dialN(target, 1)
	if err != nil {
		return err
	}
	defer closeAll(conns)
	call, err := listCall(conns[0], way)
	if err != nil {
		return err
	}
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		n, err := strconv.Atoi(in.Text())
		if err != nil {
			return fmt.Errorf("lister: asked %q, want a number of calls", in.Text())
		}
		for range n {
			start := time.Now()
			got, err := call(context.Background())
			took := time.Since(start)
			if err == nil && got != want {
				err = fmt.Errorf("ListAllEndpoints returned %d endpoints, want %d", got, want)
			}
			if err != nil {
				return err
			}
			fmt.Println(int64(took))
		}
	}
	return in.Err()
}

// listCall returns a call that lists everything the named way and returns how
// many endpoints it got; it keeps the listing until the next call.
func listCall(cc *grpc.ClientConn, way string) (func(context.Context) (int, error), error) {
	big := grpc.MaxCallRecvMsgSize(1 << 30)
	switch way {
	case "undecoded":
		var wire []byte
		return func(ctx context.Context) (int, error) {
			err := cc.Invoke(ctx, registrarv1.Registrar_ListAllEndpoints_FullMethodName, &registrarv1.ListAllEndpointsRequest{}, &wire, raw, big)
			return countListed(wire), err
		}, nil
	case "generated":
		api := registrarv1.NewRegistrarClient(cc)
		var resp *registrarv1.ListAllEndpointsResponse
		return func(ctx context.Context) (n int, err error) {
			resp, err = api.ListAllEndpoints(ctx, &registrarv1.ListAllEndpointsRequest{}, big)
			return len(resp.GetEndpoints()), err
		}, nil
	case "client":
		var eps []endpoint.Endpoint
		return func(ctx context.Context) (n int, err error) {
			eps, _, err = client.ListAll(ctx, cc, endpoint.Filter{}, big)
			return len(eps), err
		}, nil
	}
	return nil, fmt.Errorf("-way %q: want undecoded, generated or client", way)
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
		if num == wire.ListFieldEndpoints {
			n++
		}
	}
	return n
}
