package registrar

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/internal/wire"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

// fanoutWatchers and fanoutConns shape BenchmarkRegisterFanout: 100 watch streams
// over 4 connections, as agents hold them (a stream each), in this process.
const (
	fanoutWatchers = 100
	fanoutConns    = 4
)

// BenchmarkRegisterFanout times a registration from the RegisterEndpoint call
// until every one of fanoutWatchers watchers has received its event, over loopback
// gRPC, on the memory backend: the path a registration takes through the registrar
// (accept, the history ring, the senders, the watch streams), with the write-behind
// batches persisting in the background. Each registration changes the endpoint's
// weight, so each is one ENDPOINT_UPDATED event for every watcher. The watchers
// read each event's type off its bytes and decode nothing else, so the figure is
// the registrar's, not the cost of a hundred agents decoding on the same cores.
func BenchmarkRegisterFanout(b *testing.B) {
	benchRegisterFanout(b, nil, context.Background)
}

// benchRegisterFanout runs BenchmarkRegisterFanout with the writer's connection made
// with dopts, each call made in a context from callCtx.
func benchRegisterFanout(b *testing.B, dopts []grpc.DialOption, callCtx func() context.Context) {
	backend := memory.New()
	defer backend.Close()
	s, err := NewServer(ServerConfig{Registrar: Config{Cluster: "east", Backend: backend, BatchInterval: 10 * time.Millisecond}, Listen: "127.0.0.1:0"})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-s.Registrar().Ready()

	dial := func(opts ...grpc.DialOption) *grpc.ClientConn {
		c, err := grpc.NewClient(s.Addr().String(), append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	writerConn := dial(dopts...)
	defer writerConn.Close()
	writer := registrarv1.NewRegistrarClient(writerConn)

	// Every watcher counts the changes it receives; the one that completes a
	// registration's fan-out tells the loop.
	var got, target atomic.Int64
	complete := make(chan struct{}, 1)
	count := func(n int64) {
		if got.Add(n) == target.Load() {
			complete <- struct{}{}
		}
	}
	var ready sync.WaitGroup
	var wg sync.WaitGroup
	wctx, wcancel := context.WithCancel(context.Background())
	defer func() { wcancel(); wg.Wait() }()
	watch := &grpc.StreamDesc{ServerStreams: true}
	method := "/" + registrarv1.Registrar_ServiceDesc.ServiceName + "/WatchEndpoints"
	for range fanoutConns {
		conn := dial()
		defer conn.Close()
		for range fanoutWatchers / fanoutConns {
			st, err := conn.NewStream(wctx, watch, method, grpc.ForceCodecV2(benchCodec{}))
			if err != nil {
				b.Fatal(err)
			}
			if err := st.SendMsg(&registrarv1.WatchEndpointsRequest{NodeName: "bench", AcceptBatches: true}); err != nil {
				b.Fatal(err)
			}
			if err := st.CloseSend(); err != nil {
				b.Fatal(err)
			}
			ready.Add(1)
			wg.Go(func() { watchCounting(st, &ready, count) })
		}
	}
	ready.Wait()

	e := ep("east", "web", "10.0.0.1", 80)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e.Weight = i%1000 + 1
		target.Store(int64(fanoutWatchers * (i + 1)))
		if _, err := writer.RegisterEndpoint(callCtx(), &registrarv1.RegisterEndpointRequest{Endpoints: protos(e)}); err != nil {
			b.Fatal(err)
		}
		select {
		case <-complete:
		case <-time.After(30 * time.Second):
			b.Fatalf("registration %d reached %d of %d watchers in 30s", i, got.Load()-int64(fanoutWatchers*i), fanoutWatchers)
		}
	}
	b.StopTimer()
}

// benchCodec sends requests as protobuf and receives messages undecoded, into a
// *[]byte.
type benchCodec struct{}

func (benchCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, err := proto.Marshal(v.(proto.Message))
	return mem.BufferSlice{mem.SliceBuffer(b)}, err
}

func (benchCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (benchCodec) Name() string { return "proto" }

// watchCounting reads a watch stream, marks ready once its snapshot is complete,
// and counts every ADDED, UPDATED or REMOVED after it, alone or in a BATCH.
func watchCounting(st grpc.ClientStream, ready *sync.WaitGroup, count func(int64)) {
	synced := false
	defer func() {
		if !synced {
			ready.Done()
		}
	}()
	for {
		var b []byte
		if err := st.RecvMsg(&b); err != nil {
			return
		}
		switch t := eventType(b); t {
		case registrarv1.EndpointEvent_SNAPSHOT_COMPLETE:
			if !synced {
				synced = true
				ready.Done()
			}
		case registrarv1.EndpointEvent_BATCH:
			n := int64(0)
			for len(b) > 0 {
				num, typ, k := protowire.ConsumeTag(b)
				if k < 0 {
					break
				}
				b = b[k:]
				if num == wire.EventFieldEvents && typ == protowire.BytesType {
					ev, m := protowire.ConsumeBytes(b)
					if m < 0 {
						break
					}
					if isChange(eventType(ev)) {
						n++
					}
					b = b[m:]
					continue
				}
				m := protowire.ConsumeFieldValue(num, typ, b)
				if m < 0 {
					break
				}
				b = b[m:]
			}
			count(n)
		default:
			if isChange(t) {
				count(1)
			}
		}
	}
}

// eventType reads an encoded EndpointEvent's type (its first field, as the
// registrar writes it; FULL_SNAPSHOT, the zero value, has none).
func eventType(b []byte) registrarv1.EndpointEvent_EventType {
	if num, typ, n := protowire.ConsumeTag(b); n > 0 && num == wire.EventFieldType && typ == protowire.VarintType {
		v, _ := protowire.ConsumeVarint(b[n:])
		return registrarv1.EndpointEvent_EventType(v)
	}
	return registrarv1.EndpointEvent_FULL_SNAPSHOT
}

func isChange(t registrarv1.EndpointEvent_EventType) bool {
	return t == registrarv1.EndpointEvent_ENDPOINT_ADDED || t == registrarv1.EndpointEvent_ENDPOINT_UPDATED || t == registrarv1.EndpointEvent_ENDPOINT_REMOVED
}
