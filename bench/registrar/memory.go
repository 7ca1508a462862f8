package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// idleMemory measures the registrar's heap and goroutine stacks per idle watcher,
// read after a forced GC from the registrar's /debug/memory (ServerConfig.DebugMemory).
// The watchers run in a child process, so only the registrar's side is counted.
func idleMemory(ctx context.Context, e *env, o options) ([]result, error) {
	srv, stop, err := e.preloaded(ctx, "memory", o.endpoints)
	if err != nil {
		return nil, err
	}
	defer stop()
	addr := srv.Addr().String()
	// One watcher first, so the shared snapshot is built before the baseline.
	if err := runWatchers(ctx, addr, 1, 1, nil); err != nil {
		return nil, err
	}
	before, err := debugMemory(srv)
	if err != nil {
		return nil, err
	}
	var after memStats
	err = runWatchers(ctx, addr, o.watchers, o.conns, func() error {
		deadline := time.Now().Add(30 * time.Second)
		for srv.Registrar().Watchers() < o.watchers && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(time.Second) // let send buffers drain and goroutines park
		after, err = debugMemory(srv)
		return err
	})
	if err != nil {
		return nil, err
	}
	kib := func(a, b int64) float64 { return float64(a-b) / float64(o.watchers) / 1024 }
	heap, stacks := kib(after.heap, before.heap), kib(after.stacks, before.stacks)
	per := heap + stacks
	return []result{{scenario: "Registrar memory per idle watcher (heap + stacks, from /debug/memory)",
		setup: fmt.Sprintf("%d watchers / %d conns (%s watchers), %d endpoints", o.watchers, o.conns, transport.watcher, o.endpoints),
		value: fmt.Sprintf("%.1f KiB (heap %.1f + stacks %.1f)", per, heap, stacks), goal: "≤ 8 KiB", anchor: "42 KiB", ok: ptr(per <= 8)}}, nil
}

// memStats is what the registrar's /debug/memory reports.
type memStats struct{ heap, stacks int64 }

// debugMemory reads the registrar's heap and stacks in use after a GC, the least of
// three readings 300 ms apart: the backstop poll lists the whole backend every few
// seconds, and a reading taken while its result is live would charge it to the
// watchers.
func debugMemory(srv *server) (memStats, error) {
	var low memStats
	for i := range 3 {
		if i > 0 {
			time.Sleep(300 * time.Millisecond)
		}
		m, err := readDebugMemory(srv)
		if err != nil {
			return memStats{}, err
		}
		if i == 0 || m.heap+m.stacks < low.heap+low.stacks {
			low = m
		}
	}
	return low, nil
}

func readDebugMemory(srv *server) (memStats, error) {
	resp, err := http.Get("http://" + srv.HealthAddr().String() + "/debug/memory")
	if err != nil {
		return memStats{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return memStats{}, fmt.Errorf("/debug/memory: %s", resp.Status)
	}
	var m memStats
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, v, _ := strings.Cut(sc.Text(), " ")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return memStats{}, fmt.Errorf("/debug/memory line %q: %w", sc.Text(), err)
		}
		switch name {
		case "heap_inuse_bytes":
			m.heap = n
		case "stack_inuse_bytes":
			m.stacks = n
		}
	}
	return m, sc.Err()
}

// inUse is heap in use plus goroutine stacks, after collecting garbage: for the
// scoped scenario's agents, in their own process.
func inUse() uint64 {
	var m runtime.MemStats
	for range 3 {
		runtime.GC()
	}
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

// runWatchers starts a child process holding n idle watchers on addr, calls measure
// once they all have their snapshot, then stops the child.
func runWatchers(ctx context.Context, addr string, n, conns int, measure func() error) error {
	return runChild(ctx, []string{"-role", "watchers", "-target", addr, "-watchers", strconv.Itoa(n), "-conns", strconv.Itoa(conns)},
		func() error {
			if measure != nil {
				return measure()
			}
			return nil
		}, nil)
}

// runChild re-runs this program with args, waits for it to print "ready", runs
// during, then closes the child's stdin (which ends an idle child) and, when out is
// set, collects the numbers it prints, one per line.
func runChild(ctx context.Context, args []string, during func() error, out *[]int64) error {
	c, err := startChild(ctx, args, childProfile)
	if err != nil {
		return err
	}
	err = during()
	if out != nil && err == nil {
		for c.lines.Scan() {
			v, perr := strconv.ParseInt(c.lines.Text(), 10, 64)
			if perr != nil {
				err = fmt.Errorf("child output %q: %w", c.lines.Text(), perr)
				break
			}
			*out = append(*out, v)
		}
	}
	if werr := c.wait(); err == nil {
		err = werr
	}
	return err
}

// child is this program run again in another role, talking over its stdin and
// stdout.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines *bufio.Scanner
}

// startChild re-runs this program with args (and -cpuprofile profile, if set) and
// waits for it to print "ready".
func startChild(ctx context.Context, args []string, profile string) (*child, error) {
	args = append(args, transport.childArgs()...)
	if profile != "" {
		args = append(args, "-cpuprofile", profile)
	}
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, stdin: stdin, lines: bufio.NewScanner(stdout)}
	if !c.lines.Scan() || c.lines.Text() != "ready" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("child %v: %q, %v", args[:2], c.lines.Text(), c.lines.Err())
	}
	return c, nil
}

// wait closes the child's stdin, which ends it, and waits for it to exit.
func (c *child) wait() error {
	c.stdin.Close()
	return c.cmd.Wait()
}

// watcherProcess is the child: it holds n watchers until stdin closes.
func watcherProcess(target string, n, conns int) error {
	if transport.watcher == "h2" {
		cs, err := dialH2N(target, conns, h2Fatal)
		if err != nil {
			return err
		}
		defer closeH2(cs)
		if _, err := h2Watchers(cs, make([]string, n), nil, nil, h2Fatal); err != nil {
			return err
		}
		fmt.Println("ready")
		_, _ = io.Copy(io.Discard, os.Stdin)
		return nil
	}
	cs, ctx, done, err := childConns(target, conns)
	if err != nil {
		return err
	}
	defer done()
	streams, _, err := openWatchers(ctx, cs, n, "")
	if err != nil {
		return err
	}
	for _, st := range streams {
		go func() {
			for {
				var b []byte
				if st.RecvMsg(&b) != nil {
					return
				}
			}
		}()
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}
