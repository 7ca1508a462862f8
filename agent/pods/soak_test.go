package pods_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/switchboard-mesh/switchboard/agent/pods"
	cniv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/cni/v1"
)

// soakPod is what the soak knows about a pod it created.
type soakPod struct {
	pod       *corev1.Pod
	ip        string
	container string
	managed   bool
	ready     bool
}

// 500 pods go through ADD and DEL over the real socket while the API server's pods
// are created, flipped between Ready and not and deleted; about one DEL in ten is
// lost, and the controller (server included) restarts at random on the same state
// directory. At the end, after the reconciler's resync, the registry holds exactly
// the endpoints of the Ready managed pods, and the records exactly the live pods'.
// SOAK_SEED repeats a run.
func TestSoakAddDelCycles(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SOAK_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("seed %d (SOAK_SEED=%d repeats this run)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	n := newTestNode(t)
	n.start(nil)
	var live []*soakPod
	made, cycles, dropped, restarts := 0, 0, 0, 0
	for cycles < 500 {
		switch r := rng.IntN(100); {
		case len(live) < 3 || len(live) < 20 && r < 45:
			live = append(live, soakAdd(n, rng, made))
			made++
		case r < 60:
			p := live[rng.IntN(len(live))]
			p.ready = !p.ready
			n.update(p.pod.Name, withReady(p.ready))
		default:
			i := rng.IntN(len(live))
			if soakDel(n, rng, live[i]) {
				dropped++
			}
			live = slices.Delete(live, i, i+1)
			cycles++
		}
		if rng.IntN(100) < 2 {
			n.stop()
			n.start(nil)
			restarts++
		}
	}
	t.Logf("%d pods, %d ADD/DEL cycles, %d DELs dropped, %d restarts, %d pods live", made, cycles, dropped, restarts, len(live))

	var want []string
	for _, p := range live {
		if p.managed && p.ready {
			want = append(want, key(p.ip, 8080))
		}
	}
	slices.Sort(want)
	n.registered("the Ready managed pods' endpoints", want...)
	eventually(t, "records (files and gauge) of the live pods only", func() bool {
		return n.recordFiles() == len(live) && int(value(t, n.metrics, "switchboard_agent_pod_records")) == len(live)
	})
}

// soakAdd creates pod number i in the API, then ADDs it as the runtime would.
func soakAdd(n *testNode, rng *rand.Rand, i int) *soakPod {
	p := &soakPod{ip: fmt.Sprintf("10.1.%d.%d", i/250, i%250+1), container: fmt.Sprintf("ctr-%d", i),
		managed: rng.IntN(5) > 0, ready: rng.IntN(2) == 0}
	opts := []podOpt{withReady(p.ready)}
	if !p.managed {
		opts = append(opts, withLabel(pods.KeyRegister, ""))
	}
	if rng.IntN(4) == 0 {
		opts = append(opts, withIPs(p.ip)) // the kubelet was quicker than the reconciler
	}
	p.pod = newPod(fmt.Sprintf("pod-%d", i), opts...)
	n.create(p.pod)
	uid := string(p.pod.UID)
	if rng.IntN(5) == 0 {
		uid = "" // a runtime that does not send K8S_POD_UID
	}
	req := addRequest(p.container, p.pod.Namespace, p.pod.Name, uid, p.ip)
	if _, err := n.cni.Add(callCtx(n.t), req); err != nil {
		n.t.Fatalf("ADD %s: %v", p.pod.Name, err)
	}
	return p
}

// soakDel DELs the pod (unless the DEL is lost) and deletes it from the API; it
// reports whether the DEL was lost.
func soakDel(n *testNode, rng *rand.Rand, p *soakPod) bool {
	lost := rng.IntN(10) == 0
	if !lost {
		req := &cniv1.DelRequest{Ref: refOf(p.container), Pod: &cniv1.Pod{Namespace: p.pod.Namespace, Name: p.pod.Name, Uid: string(p.pod.UID)}}
		resp, err := n.cni.Del(callCtx(n.t), req)
		if err != nil || !resp.GetFound() {
			n.t.Fatalf("DEL %s = %v, %v; want found", p.pod.Name, resp, err)
		}
	}
	n.remove(p.pod.Name)
	return lost
}
