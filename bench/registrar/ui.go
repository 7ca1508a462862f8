package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
)

// pageScenario measures the registrar's web page at -snapshot-endpoints endpoints:
// how long its first view takes to load, and whether an open page slows the
// fan-out. The fan-out runs twice, alternating without and with the page open, so
// that both halves meet the same machine; the page's viewer is what live.js does in
// a browser: it follows /ui/events and fetches /ui/fragment after each message, no
// more often than every 150 ms.
func pageScenario(ctx context.Context, e *env, o options) ([]result, error) {
	first, err := firstView(ctx, e, o.snapshotLarge)
	if err != nil {
		return nil, err
	}
	rows := []result{{scenario: "Page: first view of /ui (median of 5 loads, each of a version not rendered before)", setup: fmt.Sprintf("%d endpoints", o.snapshotLarge),
		value: ms(first), goal: "≤ 1 s", ok: ptr(first <= time.Second)}}
	var without, with []time.Duration
	var fetches int64
	// Later runs of a process fare worse (the A/A runs of this scenario, the page
	// off in both columns, gave 1.14× and 1.31×), so each side runs first in one
	// round and second in the other.
	for round := range 2 {
		for _, page := range []bool{round == 1, round == 0} {
			c := fanoutCase{watchers: o.watchers, conns: o.conns, endpoints: o.snapshotLarge, resume: true, page: page}
			p99, n, err := fanoutP99(ctx, e, o, c)
			if err != nil {
				return nil, fmt.Errorf("round %d, page open %v: %w", round, page, err)
			}
			if page {
				with, fetches = append(with, p99), fetches+n
			} else {
				without = append(without, p99)
			}
		}
	}
	a, b := slices.Max(without), slices.Max(with)
	ratio := float64(b) / float64(a)
	what := fmt.Sprintf("%d watchers, %d endpoints, %d registrations %s apart, two rounds each, each side first in one, worse round", o.watchers, o.snapshotLarge, o.registrations, o.interval)
	return append(rows,
		result{scenario: "Page: fan-out p99 without the page", setup: what, value: ms(a)},
		result{scenario: "Page: fan-out p99 with the page open", setup: what + fmt.Sprintf("; the page fetched its live part %d times", fetches), value: ms(b)},
		result{scenario: "Page: fan-out p99 with / without", setup: what, value: fmt.Sprintf("%.2f×", ratio), goal: "≤ 1.1×", ok: ptr(ratio <= 1.1)},
	), nil
}

// fanoutP99 runs the fan-out scenario and returns its p99 and, with the page open,
// how many times the viewer fetched the page's live part.
func fanoutP99(ctx context.Context, e *env, o options, c fanoutCase) (time.Duration, int64, error) {
	var fetched atomic.Int64
	var p99 time.Duration
	c.fetched, c.p99 = &fetched, &p99
	_, err := fanout(ctx, e, o, c)
	return p99, fetched.Load(), err
}

// firstView starts a registrar over n endpoints, waits until its page holds all of
// them, then five times changes one endpoint and loads /ui: each load follows a new
// version, so none is served from the page's cache of renderings. It returns the
// median load.
func firstView(ctx context.Context, e *env, n int) (time.Duration, error) {
	srv, stop, err := e.preloaded(ctx, "page", n)
	if err != nil {
		return 0, err
	}
	defer stop()
	base := "http://" + srv.HealthAddr().String()
	if err := waitPage(ctx, base, fmt.Sprintf("%d endpoints", n)); err != nil {
		return 0, err
	}
	conns, err := dialN(srv.Addr().String(), 1)
	if err != nil {
		return 0, err
	}
	defer closeAll(conns)
	api := registrarv1.NewRegistrarClient(conns[0])
	var took []time.Duration
	for i := range 5 {
		// A new endpoint, then a pause longer than the page's poll of the registrar:
		// the page holds the new version, and nobody has rendered it yet.
		ep := fanoutEndpoint(i).ToProto()
		if _, err := api.RegisterEndpoint(ctx, &registrarv1.RegisterEndpointRequest{Endpoints: []*registryv1.Endpoint{ep}}); err != nil {
			return 0, err
		}
		time.Sleep(300 * time.Millisecond)
		body, d, err := get(ctx, base+"/ui")
		if err != nil {
			return 0, err
		}
		if want := fmt.Sprintf("%d endpoints", n+i+1); !strings.Contains(body, want) {
			return 0, fmt.Errorf("the page does not show %q 300 ms after a registration", want)
		}
		took = append(took, d)
	}
	slices.Sort(took)
	return took[len(took)/2], nil
}

// waitPage loads base/ui until it contains want, for at most a minute.
func waitPage(ctx context.Context, base, want string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		body, _, err := get(ctx, base+"/ui")
		if err != nil {
			return err
		}
		if strings.Contains(body, want) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the page does not show %q after a minute", want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// get fetches url whole and returns its body and how long that took.
func get(ctx context.Context, url string) (string, time.Duration, error) {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), time.Since(start), err
}

// pageViewer is the child that views the page at base until its stdin closes,
// then prints how many times it fetched the page's live part.
func pageViewer(base string) error {
	ctx, cancel := context.WithCancel(context.Background())
	var fetched atomic.Int64
	if err := viewPage(ctx, base, &fetched); err != nil {
		cancel()
		return err
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	cancel()
	fmt.Println(fetched.Load())
	return nil
}

// count ends a page viewer and returns the fetches it printed (0 if it printed
// none).
func (c *child) count() int64 {
	c.stdin.Close()
	var n int64
	if c.lines.Scan() {
		n, _ = strconv.ParseInt(c.lines.Text(), 10, 64)
	}
	_ = c.cmd.Wait()
	return n
}

// viewPage does what an open page does until ctx ends: it follows the event stream
// at base/ui/events and fetches base/ui/fragment after a message, at most every
// 150 ms, counting the fetches in fetched.
func viewPage(ctx context.Context, base string, fetched *atomic.Int64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/ui/events", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req) //nolint:bodyclose // the stream's reader below closes it
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return fmt.Errorf("GET /ui/events: %s", resp.Status)
	}
	changed := make(chan struct{}, 1)
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data:") {
				select {
				case changed <- struct{}{}:
				default:
				}
			}
		}
	}()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
			if _, _, err := get(ctx, base+"/ui/fragment"); err == nil {
				fetched.Add(1)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(150 * time.Millisecond):
			}
		}
	}()
	return nil
}
