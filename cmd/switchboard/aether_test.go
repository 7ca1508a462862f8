package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-mesh/switchboard/endpoint"
	aetherregistrarv1 "github.com/switchboard-mesh/switchboard/gen/aether/registrar/v1"
	aetherregistryv1 "github.com/switchboard-mesh/switchboard/gen/aether/registry/v1"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
	"github.com/switchboard-mesh/switchboard/internal/embedetcd"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil/tlstest"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/etcd"
)

// aetherWait bounds every wait of these tests on the registrar.
const aetherWait = 20 * time.Second

// Aether's agent, as a Go client generated from our aether.* protos, against a
// running registrar process on etcd: registers, watches (full and scoped),
// resumes on the same registrar and after a restart, lists; writes through either
// API show through both.
func TestAetherClientAgainstRegistrarOnEtcd(t *testing.T) {
	cluster := embedetcd.New(t, embedetcd.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), aetherWait)
	defer cancel()
	backend, err := etcd.New(ctx, etcd.Options{Endpoints: cluster.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { backend.Close() })
	testAetherWire(t, backend, "--registry-backend", "etcd", "--etcd-endpoints", cluster.Endpoints()[0])
}

// The same on JetStream.
func TestAetherClientAgainstRegistrarOnJetStream(t *testing.T) {
	f := startNATS(t)
	testAetherWire(t, f.r, f.flags...)
}

// aetherRegistrar is a registrar process and clients of both APIs on it.
type aetherRegistrar struct {
	proc   *childProc
	aether aetherregistrarv1.RegistrarServiceClient
	ours   registrarv1.RegistrarClient
}

// startAetherRegistrar runs `switchboard registrar` for cluster east on addr with
// the backend flags, and waits until it is ready.
func startAetherRegistrar(t *testing.T, addr, health string, backend []string) *aetherRegistrar {
	t.Helper()
	args := append([]string{"registrar", "--cluster-name", "east", "--listen", addr, "--health-listen", health,
		"--write-batch-interval", "20ms", "--log-level", "error"}, backend...)
	p := startProc(t, "registrar", nil, args...)
	p.waitReady(health)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &aetherRegistrar{proc: p, aether: aetherregistrarv1.NewRegistrarServiceClient(conn), ours: registrarv1.NewRegistrarClient(conn)}
}

func testAetherWire(t *testing.T, direct registry.Registry, backend ...string) {
	addr, health := "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
	r := startAetherRegistrar(t, addr, health, backend)

	// Through Aether's API, every field set; through ours, an endpoint of the
	// same service, one of another, and one of a protocol Aether cannot name.
	fromAether := &aetherregistryv1.ServiceEndpoint{
		Ip: "10.0.0.1", ClusterName: "east", Port: 8080, Weight: 7,
		Locality:           &aetherregistryv1.ServiceEndpoint_Locality{Region: "eu-west-1", Zone: "eu-west-1a"},
		Metadata:           map[string]string{"version": "v2"},
		ContainerMetadata:  &aetherregistryv1.ServiceEndpoint_ContainerMetadata{ContainerId: "c0ffee", NetworkNamespace: "/var/run/netns/cni-1"},
		KubernetesMetadata: &aetherregistryv1.ServiceEndpoint_KubernetesMetadata{Namespace: "shop", PodName: "web-0"},
	}
	aetherRegister(t, r.aether, "web", fromAether)
	oursRegister(t, r.ours, endpoint.Endpoint{Cluster: "east", Service: "web", Protocol: "http", Address: "10.0.0.2", Port: 8080, Priority: 1})
	oursRegister(t, r.ours, endpoint.Endpoint{Cluster: "east", Service: "api", Protocol: "http", Address: "10.0.0.3", Port: 9000, Priority: 1})
	oursRegister(t, r.ours, endpoint.Endpoint{Cluster: "east", Service: "db", Protocol: "tcp", Address: "10.0.0.9", Port: 5432, Priority: 1})

	full := openAetherWatch(t, r.aether, &aetherregistrarv1.WatchEndpointsRequest{ClusterName: "east", NodeName: "node-1"})
	full.initial(t)
	full.wantCache(t, "api/10.0.0.3", "web/10.0.0.1", "web/10.0.0.2")
	full.wantCatalog(t, "api", "web")
	if got := full.cache["web/10.0.0.1"]; !proto.Equal(got, fromAether) {
		t.Fatalf("the endpoint registered through Aether's API came back as\n%v\nwant\n%v", got, fromAether)
	}
	scoped := openAetherWatch(t, r.aether, &aetherregistrarv1.WatchEndpointsRequest{Filter: &aetherregistrarv1.ServiceFilter{Services: []string{"web"}}})
	scoped.initial(t)
	scoped.wantCache(t, "web/10.0.0.1", "web/10.0.0.2")
	scoped.wantCatalog(t, "api", "web") // the catalog bypasses the filter

	// Aether's registration through ours: in our list, and as our watch's event.
	ourWatch := openOurWatch(t, r.ours)
	if e := ourEndpoint(t, r.ours, "web", "10.0.0.1"); e.GetAnnotations()["aether.switchboard.dev/kubernetes-pod-name"] != "web-0" || e.GetZone() != "eu-west-1a" {
		t.Fatalf("our API lists the Aether registration as %v", e)
	}
	// A namespace-qualified Aether name is NAME__NS in ours, and comes back as
	// it went.
	aetherRegister(t, r.aether, "shop/cache", &aetherregistryv1.ServiceEndpoint{Ip: "10.0.0.4", Port: 6379})
	ourWatch.waitAdded(t, "cache__shop", "10.0.0.4")
	ourEndpoint(t, r.ours, "cache__shop", "10.0.0.4")

	// A new service: the full watch gets the endpoint and the catalog event, the
	// scoped one the catalog event only.
	full.until(t, func(w *aetherStream) bool { return w.catalog["shop/cache"] && w.cache["shop/cache/10.0.0.4"] != nil })
	scoped.until(t, func(w *aetherStream) bool { return w.catalog["shop/cache"] })
	aetherUnregister(t, r.aether, "shop/cache", "10.0.0.4")
	full.until(t, func(w *aetherStream) bool { return !w.catalog["shop/cache"] && w.cache["shop/cache/10.0.0.4"] == nil })
	scoped.until(t, func(w *aetherStream) bool { return !w.catalog["shop/cache"] })
	if n := scoped.endpointEvents; n != 0 {
		t.Fatalf("the scoped watch got %d endpoint events of services outside its filter", n)
	}

	// Live writes through our API reach the Aether watch that stays connected: a
	// registration as ADDED, and a re-registration with another weight as
	// ENDPOINT_UPDATED carrying the new weight.
	live := endpoint.Endpoint{Cluster: "east", Service: "web", Protocol: "http", Address: "10.0.0.6", Port: 8080, Priority: 1, Weight: 3}
	oursRegister(t, r.ours, live)
	full.until(t, func(w *aetherStream) bool {
		return w.lastType["web/10.0.0.6"] == aetherregistrarv1.WatchEndpointsResponse_EVENT_TYPE_ENDPOINT_ADDED
	})
	if got := full.cache["web/10.0.0.6"].GetWeight(); got != 3 {
		t.Fatalf("the ADDED of our registration carries weight %d, want 3", got)
	}
	live.Weight = 9
	oursRegister(t, r.ours, live)
	full.until(t, func(w *aetherStream) bool {
		return w.lastType["web/10.0.0.6"] != aetherregistrarv1.WatchEndpointsResponse_EVENT_TYPE_ENDPOINT_ADDED
	})
	if typ, got := full.lastType["web/10.0.0.6"], full.cache["web/10.0.0.6"].GetWeight(); typ != aetherregistrarv1.WatchEndpointsResponse_EVENT_TYPE_ENDPOINT_UPDATED || got != 9 {
		t.Fatalf("the re-registration with weight 9 reached the watch as %v with weight %d, want ENDPOINT_UPDATED with weight 9", typ, got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), aetherWait)
	defer cancel()
	if _, err := r.ours.UnregisterEndpoint(ctx, &registrarv1.UnregisterEndpointRequest{Endpoints: []*registryv1.Endpoint{live.ToProto()}}); err != nil {
		t.Fatal(err)
	}
	full.until(t, func(w *aetherStream) bool {
		return w.lastType["web/10.0.0.6"] == aetherregistrarv1.WatchEndpointsResponse_EVENT_TYPE_ENDPOINT_REMOVED
	})
	full.wantCache(t, "api/10.0.0.3", "web/10.0.0.1", "web/10.0.0.2")

	wantAetherList(t, r.aether, map[string][]string{"api": {"10.0.0.3"}, "web": {"10.0.0.1", "10.0.0.2"}})
	if cfg, err := r.aether.ListAllConfig(ctx, &aetherregistrarv1.ListAllConfigRequest{}); err != nil || len(cfg.GetProjections()) != 0 {
		t.Fatalf("ListAllConfig: %v (%v), want no config", cfg, err)
	}

	// Resume on the same registrar: only what changed since.
	full.close()
	oursRegister(t, r.ours, endpoint.Endpoint{Cluster: "east", Service: "web", Protocol: "http", Address: "10.0.0.5", Port: 8080, Priority: 1})
	full = full.reconnect(t, r.aether)
	if full.fullSnapshot {
		t.Fatal("a resume from a current token of the same registrar was sent a full snapshot")
	}
	full.wantCache(t, "api/10.0.0.3", "web/10.0.0.1", "web/10.0.0.2", "web/10.0.0.5")
	full.wantCatalog(t, "api", "web")

	// Restart, with a change made behind the registrar's back meanwhile: the old
	// token is of another epoch, so the client gets the whole new state.
	full.close()
	scoped.close()
	r.proc.stop(syscall.SIGTERM)
	dctx, dcancel := context.WithTimeout(context.Background(), aetherWait)
	defer dcancel()
	if err := direct.Apply(dctx, []registry.Op{registry.Unregister(endpoint.Endpoint{Cluster: "east", Service: "api", Protocol: "http", Address: "10.0.0.3", Port: 9000})}); err != nil {
		t.Fatal(err)
	}
	r = startAetherRegistrar(t, addr, health, backend)
	full = full.reconnect(t, r.aether)
	full.wantCache(t, "web/10.0.0.1", "web/10.0.0.2", "web/10.0.0.5")
	full.wantCatalog(t, "web")
	if got := full.cache["web/10.0.0.1"]; !proto.Equal(got, fromAether) {
		t.Fatalf("after the restart the Aether registration reads\n%v\nwant\n%v", got, fromAether)
	}
	scoped = scoped.reconnect(t, r.aether)
	scoped.wantCache(t, "web/10.0.0.1", "web/10.0.0.2", "web/10.0.0.5")
	wantAetherList(t, r.aether, map[string][]string{"web": {"10.0.0.1", "10.0.0.2", "10.0.0.5"}})
	aetherBadInput(t, r)
}

// aetherBadInput: bad registrations are InvalidArgument naming the field, and
// store nothing.
func aetherBadInput(t *testing.T, r *aetherRegistrar) {
	before := aetherList(t, r.aether)
	for field, ep := range map[string]*aetherregistryv1.ServiceEndpoint{
		"endpoint.ip":                {Ip: "", Port: 80},
		"endpoint.port":              {Ip: "10.0.1.1", Port: 65536},
		"endpoint.locality.zone":     {Ip: "10.0.1.2", Port: 80, Locality: &aetherregistryv1.ServiceEndpoint_Locality{Zone: "eu west!"}},
		"endpoint.metadata[bad key]": {Ip: "10.0.1.3", Port: 80, Metadata: map[string]string{"bad key": "x"}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), aetherWait)
		_, err := r.aether.RegisterEndpoint(ctx, &aetherregistrarv1.RegisterEndpointRequest{ServiceName: "bad", Protocol: aetherregistryv1.Service_HTTP, Endpoint: ep})
		cancel()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), field) {
			t.Errorf("registering %v: %v, want InvalidArgument naming %s", ep, err, field)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), aetherWait)
	defer cancel()
	_, err := r.aether.RegisterEndpoint(ctx, &aetherregistrarv1.RegisterEndpointRequest{ServiceName: "bad", Endpoint: &aetherregistryv1.ServiceEndpoint{Ip: "10.0.1.4"}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "protocol") {
		t.Errorf("registering without a protocol: %v, want InvalidArgument naming protocol", err)
	}
	_, err = r.aether.UnregisterEndpoint(ctx, &aetherregistrarv1.UnregisterEndpointRequest{ServiceName: "web", Ips: []string{"10.0.0.1", ""}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "ips[1]") {
		t.Errorf("unregistering an empty IP: %v, want InvalidArgument naming ips[1]", err)
	}
	if after := aetherList(t, r.aether); !proto.Equal(after, before) {
		t.Fatalf("refused requests changed the registrar:\nbefore %v\nafter  %v", before, after)
	}
}

// Through Aether's API a node may write only its own entries, as through ours:
// the registration is stored under the caller's node, and another node can
// neither overwrite nor remove it. An unregister of an address two nodes share
// removes the caller's endpoints only.
func TestAetherWritesAreAuthorizedLikeOurs(t *testing.T) {
	ca, server := registrarPKI(t)
	p := startRegistrar(t, "--tls-cert", server.Cert, "--tls-key", server.Key, "--tls-client-ca", server.CA,
		"--listen", "127.0.0.1:0", "--health-listen", "")
	if p.addr == "" {
		t.Fatalf("exit %d, want the registrar serving; stderr:\n%s", p.code(), p.stderr)
	}
	as := func(node string) (aetherregistrarv1.RegistrarServiceClient, registrarv1.RegistrarClient) {
		f := writeLeaf(t, ca, tlstest.Names{URIs: []string{"spiffe://example.org/agent/" + node}}, "client")
		conf, err := tlsutil.ClientConfig(f, "", "example.org")
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(credentials.NewTLS(conf)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return aetherregistrarv1.NewRegistrarServiceClient(conn), registrarv1.NewRegistrarClient(conn)
	}
	aetherA, oursA := as("node-a")
	aetherB, _ := as("node-b")
	aetherRegister(t, aetherA, "web", &aetherregistryv1.ServiceEndpoint{Ip: "10.0.0.1", Port: 80})
	if e := ourEndpoint(t, oursA, "web", "10.0.0.1"); e.GetNode() != "node-a" {
		t.Fatalf("the registration is stored under node %q, want the caller's node-a", e.GetNode())
	}
	ctx, cancel := context.WithTimeout(context.Background(), aetherWait)
	defer cancel()
	_, err := aetherB.RegisterEndpoint(ctx, &aetherregistrarv1.RegisterEndpointRequest{ServiceName: "web", Protocol: aetherregistryv1.Service_HTTP,
		Endpoint: &aetherregistryv1.ServiceEndpoint{Ip: "10.0.0.1", Port: 80, Weight: 99}})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("node-b overwriting node-a's endpoint: %v, want PermissionDenied", err)
	}
	aetherUnregister(t, aetherB, "web", "10.0.0.1") // none of node-b's there: removes nothing
	if e := ourEndpoint(t, oursA, "web", "10.0.0.1"); e.GetNode() != "node-a" || e.GetWeight() != 0 {
		t.Fatalf("after node-b's attempts the endpoint is %v", e)
	}
	aetherRegister(t, aetherB, "web", &aetherregistryv1.ServiceEndpoint{Ip: "10.0.0.1", Port: 81}) // the same address, node-b's port
	aetherUnregister(t, aetherA, "web", "10.0.0.1")
	if e := ourEndpoint(t, oursA, "web", "10.0.0.1"); e.GetNode() != "node-b" || e.GetPort() != 81 {
		t.Fatalf("node-a's unregister of the shared address left %v, want node-b's endpoint", e)
	}
}

func aetherRegister(t *testing.T, c aetherregistrarv1.RegistrarServiceClient, svc string, ep *aetherregistryv1.ServiceEndpoint) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), aetherWait)
	defer cancel()
	if _, err := c.RegisterEndpoint(ctx, &aetherregistrarv1.RegisterEndpointRequest{ServiceName: svc, Protocol: aetherregistryv1.Service_HTTP, Endpoint: ep}); err != nil {
		t.Fatalf("register %s %s through Aether's API: %v", svc, ep.GetIp(), err)
	}
}

func aetherUnregister(t *testing.T, c aetherregistrarv1.RegistrarServiceClient, svc string, ips ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), aetherWait)
	defer cancel()
	if _, err := c.UnregisterEndpoint(ctx, &aetherregistrarv1.UnregisterEndpointRequest{ServiceName: svc, Ips: ips}); err != nil {
		t.Fatalf("unregister %s %v through Aether's API: %v", svc, ips, err)
	}
}

func oursRegister(t *testing.T, c registrarv1.RegistrarClient, e endpoint.Endpoint) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), aetherWait)
	defer cancel()
	if _, err := c.RegisterEndpoint(ctx, &registrarv1.RegisterEndpointRequest{Endpoints: []*registryv1.Endpoint{e.ToProto()}}); err != nil {
		t.Fatalf("register %s through our API: %v", e.Key(), err)
	}
}

// ourEndpoint is the endpoint of svc at addr in our API's list.
func ourEndpoint(t *testing.T, c registrarv1.RegistrarClient, svc, addr string) *registryv1.Endpoint {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), aetherWait)
	defer cancel()
	resp, err := c.ListAllEndpoints(ctx, &registrarv1.ListAllEndpointsRequest{Service: svc, Address: addr})
	if err != nil || len(resp.GetEndpoints()) != 1 {
		t.Fatalf("our list of %s %s: %v (%v), want one endpoint", svc, addr, resp.GetEndpoints(), err)
	}
	return resp.GetEndpoints()[0]
}

func aetherList(t *testing.T, c aetherregistrarv1.RegistrarServiceClient) *aetherregistrarv1.ListAllEndpointsResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), aetherWait)
	defer cancel()
	resp, err := c.ListAllEndpoints(ctx, &aetherregistrarv1.ListAllEndpointsRequest{Protocol: aetherregistryv1.Service_HTTP})
	if err != nil || resp.GetVersion() == "" {
		t.Fatalf("Aether list: %v (version %q)", err, resp.GetVersion())
	}
	resp.Version = "" // a version of the state, not of the list: compared apart
	return resp
}

func wantAetherList(t *testing.T, c aetherregistrarv1.RegistrarServiceClient, want map[string][]string) {
	t.Helper()
	got := map[string][]string{}
	for svc, eps := range aetherList(t, c).GetServices() {
		for _, ep := range eps.GetEndpoints() {
			got[svc] = append(got[svc], ep.GetIp())
		}
	}
	if len(got) != len(want) {
		t.Fatalf("Aether list: %v, want %v", got, want)
	}
	for svc, ips := range want {
		if !slices.Equal(got[svc], ips) {
			t.Fatalf("Aether list: %v, want %v", got, want)
		}
	}
}

// aetherStream is an Aether watch as Aether's agent keeps it: a cache keyed by
// service and IP, replaced by a full snapshot at its SNAPSHOT_COMPLETE, and the
// service catalog.
type aetherStream struct {
	req            *aetherregistrarv1.WatchEndpointsRequest
	cancel         context.CancelFunc
	events         chan *aetherregistrarv1.WatchEndpointsResponse
	errc           chan error
	cache          map[string]*aetherregistryv1.ServiceEndpoint
	fresh          map[string]*aetherregistryv1.ServiceEndpoint // a full snapshot being received
	catalog        map[string]bool
	version        string
	fullSnapshot   bool // this stream began with a full snapshot
	complete       bool
	endpointEvents int // ADDED, UPDATED, REMOVED received
	// lastType is the type of the last ADDED, UPDATED or REMOVED of each key.
	lastType map[string]aetherregistrarv1.WatchEndpointsResponse_EventType
}

func openAetherWatch(t *testing.T, c aetherregistrarv1.RegistrarServiceClient, req *aetherregistrarv1.WatchEndpointsRequest) *aetherStream {
	t.Helper()
	w := &aetherStream{cache: map[string]*aetherregistryv1.ServiceEndpoint{}, lastType: map[string]aetherregistrarv1.WatchEndpointsResponse_EventType{}}
	w.open(t, c, req)
	return w
}

func (w *aetherStream) open(t *testing.T, c aetherregistrarv1.RegistrarServiceClient, req *aetherregistrarv1.WatchEndpointsRequest) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := c.WatchEndpoints(ctx, req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	w.req, w.cancel, w.catalog = req, cancel, map[string]bool{}
	events, errc := make(chan *aetherregistrarv1.WatchEndpointsResponse, 1024), make(chan error, 1)
	w.events, w.errc = events, errc
	w.fresh, w.fullSnapshot, w.complete = nil, false, false
	go func() { // on this stream's channels: a reconnect replaces w's
		for {
			ev, err := stream.Recv()
			if err != nil {
				errc <- err
				return
			}
			select {
			case events <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(cancel)
}

func (w *aetherStream) close() { w.cancel() }

// reconnect opens a new stream with the same request and the last version, and
// waits for its SNAPSHOT_COMPLETE.
func (w *aetherStream) reconnect(t *testing.T, c aetherregistrarv1.RegistrarServiceClient) *aetherStream {
	t.Helper()
	req := proto.Clone(w.req).(*aetherregistrarv1.WatchEndpointsRequest)
	req.LastVersion = w.version
	w.open(t, c, req)
	w.initial(t)
	return w
}

// initial waits for the stream's SNAPSHOT_COMPLETE.
func (w *aetherStream) initial(t *testing.T) {
	t.Helper()
	w.until(t, func(w *aetherStream) bool { return w.complete })
	if w.version == "" {
		t.Fatal("SNAPSHOT_COMPLETE carried no version")
	}
}

// until applies events until done holds, for at most aetherWait.
func (w *aetherStream) until(t *testing.T, done func(*aetherStream) bool) {
	t.Helper()
	timeout := time.After(aetherWait)
	for !done(w) {
		select {
		case ev := <-w.events:
			w.apply(t, ev)
		case err := <-w.errc:
			t.Fatalf("watch ended: %v", err)
		case <-timeout:
			t.Fatalf("watch: not there within %s; cache %v, catalog %v", aetherWait, keysOf(w.cache), w.catalog)
		}
	}
}

func (w *aetherStream) apply(t *testing.T, ev *aetherregistrarv1.WatchEndpointsResponse) {
	t.Helper()
	key := ev.GetServiceName() + "/" + ev.GetEndpoint().GetIp()
	switch ev.GetType() {
	case aetherregistrarv1.WatchEndpointsResponse_EVENT_TYPE_FULL_SNAPSHOT:
		if w.complete {
			t.Fatal("FULL_SNAPSHOT after SNAPSHOT_COMPLETE")
		}
		if w.fresh == nil {
			w.fresh, w.fullSnapshot = map[string]*aetherregistryv1.ServiceEndpoint{}, true
		}
		w.fresh[key] = ev.GetEndpoint()
	case aetherregistrarv1.WatchEndpointsResponse_EVENT_TYPE_ENDPOINT_ADDED, aetherregistrarv1.WatchEndpointsResponse_EVENT_TYPE_ENDPOINT_UPDATED:
		w.endpointEvents++
		w.lastType[key] = ev.GetType()
		w.cache[key] = ev.GetEndpoint()
	case aetherregistrarv1.WatchEndpointsResponse_EVENT_TYPE_ENDPOINT_REMOVED:
		w.endpointEvents++
		w.lastType[key] = ev.GetType()
		delete(w.cache, key)
	case aetherregistrarv1.WatchEndpointsResponse_EVENT_TYPE_SERVICE_ADDED:
		w.catalog[ev.GetServiceName()] = true
	case aetherregistrarv1.WatchEndpointsResponse_EVENT_TYPE_SERVICE_REMOVED:
		delete(w.catalog, ev.GetServiceName())
	case aetherregistrarv1.WatchEndpointsResponse_EVENT_TYPE_SNAPSHOT_COMPLETE:
		if w.fresh != nil || !w.fullSnapshot && w.req.GetLastVersion() == "" {
			w.cache, w.fresh = w.fresh, nil
			if w.cache == nil {
				w.cache = map[string]*aetherregistryv1.ServiceEndpoint{}
			}
		}
		w.complete = true
	}
	if v := ev.GetVersion(); v != "" {
		w.version = v
	}
}

func (w *aetherStream) wantCache(t *testing.T, keys ...string) {
	t.Helper()
	if got := keysOf(w.cache); !slices.Equal(got, keys) {
		t.Fatalf("the watch's cache holds %v, want %v", got, keys)
	}
}

func (w *aetherStream) wantCatalog(t *testing.T, services ...string) {
	t.Helper()
	var got []string
	for svc := range w.catalog {
		got = append(got, svc)
	}
	slices.Sort(got)
	if !slices.Equal(got, services) {
		t.Fatalf("the watch's catalog is %v, want %v", got, services)
	}
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// ourStream is a watch of our own API.
type ourStream struct {
	stream grpc.ServerStreamingClient[registrarv1.EndpointEvent]
}

func openOurWatch(t *testing.T, c registrarv1.RegistrarClient) *ourStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := c.WatchEndpoints(ctx, &registrarv1.WatchEndpointsRequest{NodeName: "switchboard-agent"})
	if err != nil {
		t.Fatal(err)
	}
	return &ourStream{stream: stream}
}

// waitAdded waits for the ADDED of svc at addr.
func (o *ourStream) waitAdded(t *testing.T, svc, addr string) {
	t.Helper()
	found := make(chan error, 1)
	go func() { found <- awaitAdded(o.stream.Recv, svc, addr) }()
	select {
	case err := <-found:
		if err != nil {
			t.Fatalf("our watch: %v", err)
		}
	case <-time.After(aetherWait):
		t.Fatalf("our watch: no ADDED of %s %s within %s", svc, addr, aetherWait)
	}
}

// awaitAdded receives events until the ADDED of svc at addr; a watch that ends
// first, even cleanly (io.EOF), is an error.
func awaitAdded(recv func() (*registrarv1.EndpointEvent, error), svc, addr string) error {
	for {
		ev, err := recv()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("ended (EOF) before the ADDED of %s %s", svc, addr)
		}
		if err != nil {
			return fmt.Errorf("ended before the ADDED of %s %s: %w", svc, addr, err)
		}
		if e := ev.GetEndpoint(); ev.GetType() == registrarv1.EndpointEvent_ENDPOINT_ADDED && e.GetService() == svc && e.GetAddress() == addr {
			return nil
		}
	}
}

// A watch that ends before the awaited ADDED is a failure, whether it ended
// with an error or cleanly (io.EOF).
func TestAetherAwaitAddedFailsOnAnEndedWatch(t *testing.T) {
	for _, end := range []error{io.EOF, status.Error(codes.Unavailable, "gone")} {
		evs := []*registrarv1.EndpointEvent{{Type: registrarv1.EndpointEvent_ENDPOINT_ADDED,
			Endpoint: &registryv1.Endpoint{Service: "web", Address: "10.0.0.1"}}}
		recv := func() (*registrarv1.EndpointEvent, error) {
			if len(evs) == 0 {
				return nil, end
			}
			ev := evs[0]
			evs = evs[1:]
			return ev, nil
		}
		if err := awaitAdded(recv, "cache", "10.0.0.4"); err == nil {
			t.Errorf("a watch that ended with %v before the ADDED: no error", end)
		}
	}
}
