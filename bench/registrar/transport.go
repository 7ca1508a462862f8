package main

import (
	"flag"
	"fmt"

	"google.golang.org/grpc"
)

// transportOptions are the watch streams' settings the benchmark can vary: whether
// raw watchers accept batches, and gRPC's flow-control windows and socket buffers
// (0: gRPC's defaults) on both the registrar's server and the watchers'
// connections. The bench passes them on to its child processes.
type transportOptions struct {
	// watcher is the watcher children's client: "h2", the lean one reading every
	// stream of a connection on one goroutine (h2watch.go), or "grpc", gRPC-go.
	watcher    string
	batches    bool
	compressed bool // raw watchers take compressed snapshots
	window     int  // stream and connection flow-control window, bytes
	buffer     int  // write and read buffer, bytes
}

var transport transportOptions

func (t *transportOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&t.watcher, "watcher", "h2", "the watcher children's client: h2 (lean, one goroutine per connection) or grpc (gRPC-go)")
	fs.BoolVar(&t.batches, "batches", true, "raw watchers accept BATCH events (false: one message per event, as before)")
	fs.BoolVar(&t.compressed, "compressed", true, "raw watchers take compressed snapshots (false: endpoints as they are, as before)")
	fs.IntVar(&t.window, "window", 0, "gRPC stream and connection window in bytes on both sides (0: gRPC's default)")
	fs.IntVar(&t.buffer, "buffer", 0, "gRPC write and read buffer in bytes on both sides (0: gRPC's default)")
}

// childArgs pass the options on to a child process.
func (t transportOptions) childArgs() []string {
	return []string{"-watcher=" + t.watcher, fmt.Sprintf("-batches=%v", t.batches), fmt.Sprintf("-compressed=%v", t.compressed),
		fmt.Sprint("-window=", t.window), fmt.Sprint("-buffer=", t.buffer)}
}

func (t transportOptions) String() string {
	s := t.watcher + " watchers, batches"
	if !t.batches {
		s = t.watcher + " watchers, no batches"
	}
	if t.compressed {
		s += ", compressed snapshots"
	}
	if t.window > 0 {
		s += fmt.Sprintf(", window %d KiB", t.window>>10)
	}
	if t.buffer > 0 {
		s += fmt.Sprintf(", buffers %d KiB", t.buffer>>10)
	}
	return s
}

// check refuses an unknown -watcher.
func (t transportOptions) check() error {
	if t.watcher != "h2" && t.watcher != "grpc" {
		return fmt.Errorf("-watcher %q: want h2 or grpc", t.watcher)
	}
	return nil
}

func (t transportOptions) serverOptions() []grpc.ServerOption {
	var o []grpc.ServerOption
	if t.window > 0 {
		o = append(o, grpc.InitialWindowSize(int32(t.window)), grpc.InitialConnWindowSize(int32(t.window)))
	}
	if t.buffer > 0 {
		o = append(o, grpc.WriteBufferSize(t.buffer), grpc.ReadBufferSize(t.buffer))
	}
	return o
}

func (t transportOptions) dialOptions() []grpc.DialOption {
	var o []grpc.DialOption
	if t.window > 0 {
		o = append(o, grpc.WithInitialWindowSize(int32(t.window)), grpc.WithInitialConnWindowSize(int32(t.window)))
	}
	if t.buffer > 0 {
		o = append(o, grpc.WithWriteBufferSize(t.buffer), grpc.WithReadBufferSize(t.buffer))
	}
	return o
}
