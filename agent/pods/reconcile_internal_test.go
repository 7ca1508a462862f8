package pods

import (
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/switchboard-mesh/switchboard/agent/manifest"
)

type countingSink struct {
	mu   sync.Mutex
	n    int
	last []manifest.Entry
}

func (s *countingSink) SetSource(_ string, es []manifest.Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	s.last = es
}

func readyPod(name string, created time.Time, ip string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(name + "-uid"),
			Labels: map[string]string{KeyRegister: "true", "app": "web"}, CreationTimestamp: metav1.NewTime(created)},
		Spec: corev1.PodSpec{NodeName: "node-a",
			Containers: []corev1.Container{{Name: "main", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: ip}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

// newStepper is a reconciler over a synced informer of pods, stepped by the test.
func newStepper(t *testing.T, sink Sink, objs ...*corev1.Pod) *reconciler {
	t.Helper()
	c, err := New(Config{StateDir: t.TempDir(), Socket: "unused", NodeName: "node-a", Cluster: "prod", Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	store, err := OpenStore(c.cfg.StateDir, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewSimpleClientset()
	for _, p := range objs {
		if err := client.Tracker().Add(p); err != nil {
			t.Fatal(err)
		}
	}
	src, err := newPodSource(client, "node-a", time.Minute, func() {})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	src.start(stop)
	t.Cleanup(func() { close(stop); src.shutdown() })
	deadline := time.Now().Add(15 * time.Second)
	for !src.Synced() {
		if time.Now().After(deadline) {
			t.Fatal("informer not synced")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return newReconciler(c, store, src)
}

// Two pods that derive one endpoint and were created in the same second (the API's
// timestamps have one-second granularity): the same pod wins on every step, so the
// source is handed over once, not re-set (and re-registered) whenever the informer's
// map order changes.
func TestClaimTieIsDeterministic(t *testing.T) {
	created := time.Now().Add(-time.Minute).Truncate(time.Second)
	var sink countingSink
	r := newStepper(t, &sink, readyPod("web-a", created, "10.0.0.1"), readyPod("web-b", created, "10.0.0.1"))
	for range 200 {
		if !r.step(time.Now()) {
			t.Fatal("step could not look at the pods")
		}
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if sink.n != 1 {
		t.Fatalf("SetSource called %d times over 200 steps of unchanged pods, want 1", sink.n)
	}
	if len(sink.last) != 1 || sink.last[0].Endpoint.Annotations[EndpointPod] != "web-b" {
		t.Fatalf("published %+v; want web-b's entry (equal timestamps: the name that sorts last wins)", sink.last)
	}
}
