package pods_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/switchboard-mesh/switchboard/agent/pods"
	cniv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/cni/v1"
)

// entriesFile is where the controller keeps the entries it last published.
const entriesFile = "entries.state"

// unreachableAPI is a clientset holding objs whose pod lists fail while down is set:
// its informer does not sync until then.
func unreachableAPI(down *atomic.Bool, objs ...*corev1.Pod) *fake.Clientset {
	var initial []runtime.Object
	for _, p := range objs {
		initial = append(initial, p)
	}
	c := fake.NewSimpleClientset(initial...)
	c.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if down.Load() {
			return true, nil, errors.New("dial tcp 10.96.0.1:443: connect: connection refused")
		}
		return false, nil, nil
	})
	return c
}

// An agent restarted while the API server is unreachable publishes what its
// predecessor published, so that the node's pods do not expire out of the registry:
// except the entries whose attachment record is gone (here deleted between the runs,
// and by a CNI DEL during the outage), and keeping those of pods registered from
// status.podIPs. Once the node's pods are listed, they are derived as usual.
func TestControllerRestartWithoutAPIKeepsPreviousEntries(t *testing.T) {
	web1, web2, web3, web4 := newPod("web-1"), newPod("web-2", withIPs("10.0.0.2")), newPod("web-3"), newPod("web-4", withReady(false))
	n := newTestNode(t, web1, web2, web3, web4)
	n.start(nil)
	n.add("c1", web1, "10.0.0.1")
	n.add("c3", web3, "10.0.0.3")
	n.add("c4", web4, "10.0.0.4")
	n.registered("first run", key("10.0.0.1", 8080), key("10.0.0.2", 8080), key("10.0.0.3", 8080))
	n.reason(key("10.0.0.4", 8080), pods.HeldNotReady)
	n.stop()

	// web-3's record is deleted between the runs (an agent that died between a DEL
	// and saving its entries).
	store, _, _ := openStore(t, n.dir)
	if found, err := store.Delete(pods.Ref{Network: "k8s-pod-network", ContainerID: "c3", IfName: "eth0"}); !found || err != nil {
		t.Fatalf("Delete = %v, %v", found, err)
	}

	var down atomic.Bool
	down.Store(true)
	var sink recordingSink
	n.run(func(c *pods.Config) {
		c.Sink = &sink
		c.Client = unreachableAPI(&down, web1, web3, web4) // web-2 was deleted meanwhile
	})
	sink.gives(t, "restarted without the API", key("10.0.0.1", 8080), key("10.0.0.2", 8080), key("10.0.0.4", 8080)+" held: "+pods.HeldNotReady)
	if ok, _ := n.ctrl.Ready(); ok {
		t.Fatal("ready without the node's pods listed")
	}
	resp, err := n.cni.Del(callCtx(t), &cniv1.DelRequest{Ref: refOf("c4"), Pod: &cniv1.Pod{Namespace: "default", Name: "web-4"}})
	if err != nil || !resp.GetFound() {
		t.Fatalf("DEL = %v, %v", resp, err)
	}
	sink.gives(t, "web-4's DEL during the outage", key("10.0.0.1", 8080), key("10.0.0.2", 8080))

	down.Store(false)
	eventually(t, "controller ready once the API answers", func() bool { ok, _ := n.ctrl.Ready(); return ok })
	sink.gives(t, "derived from the API", key("10.0.0.1", 8080))
}

// Entries whose TTL ran out since the previous agent last stood behind them are gone
// from the registry: a restarted agent without the API does not bring them back.
func TestControllerRestartIgnoresExpiredEntries(t *testing.T) {
	web1 := newPod("web-1", withIPs("10.0.0.1"))
	n := newTestNode(t, web1)
	n.start(nil)
	n.registered("first run", key("10.0.0.1", 8080))
	n.stop()
	long := time.Now().Add(-time.Hour) // the first run's TTL is 5s
	if err := os.Chtimes(filepath.Join(n.dir, entriesFile), long, long); err != nil {
		t.Fatal(err)
	}
	var down atomic.Bool
	down.Store(true)
	var sink recordingSink
	n.run(func(c *pods.Config) { c.Sink, c.Client = &sink, unreachableAPI(&down, web1) })
	eventually(t, "expired entries reported", func() bool {
		return strings.Contains(n.logs.String(), "expired=1")
	})
	down.Store(false)
	eventually(t, "controller ready once the API answers", func() bool { ok, _ := n.ctrl.Ready(); return ok })
	sink.gives(t, "derived from the API", key("10.0.0.1", 8080))
	if c := sink.calls(); c != 1 {
		t.Fatalf("SetSource called %d times; want once, after the pods were listed", c)
	}
}

// A saved entries file that cannot be read is moved aside and logged at ERROR; the
// controller runs on.
func TestControllerMovesCorruptEntriesAside(t *testing.T) {
	n := newTestNode(t, newPod("web-1", withIPs("10.0.0.1")))
	path := filepath.Join(n.dir, entriesFile)
	if err := os.WriteFile(path, []byte(`{"version":1,"entries":[{"endpoint":`), 0o600); err != nil {
		t.Fatal(err)
	}
	n.start(nil)
	n.registered("pods listed", key("10.0.0.1", 8080))
	moved, _ := filepath.Glob(path + ".*.bad")
	if len(moved) != 1 {
		t.Fatalf("moved-aside files %v, want one", moved)
	}
	if l := n.logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "moved aside") {
		t.Fatalf("the corrupt file is not reported at ERROR:\n%s", l)
	}
	eventually(t, "entries saved again", func() bool { _, err := os.Stat(path); return err == nil })
}
