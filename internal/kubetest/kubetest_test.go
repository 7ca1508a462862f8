package kubetest

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// waitTimeout bounds every wait on the server in these tests.
const waitTimeout = 30 * time.Second

// TestKubeAPIServer proves what the agent's pod informer relies on against the real
// server: pods selected by spec.nodeName, and status updates arriving through a
// field-selected informer.
func TestKubeAPIServer(t *testing.T) {
	c := Start(t)
	logRSS(t, c.Pid())
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	cs := c.Clientset

	const ns, node = "kubetest", "node-a"
	mustCreateNamespace(ctx, t, cs, ns)
	pod := mustCreatePod(ctx, t, cs, ns, "web-0", node)
	mustCreatePod(ctx, t, cs, ns, "other-0", "node-b")

	list, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: nodeSelector(node)})
	if err != nil {
		t.Fatalf("list pods: %v", err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "web-0" {
		t.Fatalf("pods on %s: got %d (%v), want only web-0", node, len(list.Items), podNames(list.Items))
	}

	updates := watchNode(ctx, t, cs, node)
	markReady(ctx, t, cs, pod, "10.1.0.7")
	waitForReadyIP(ctx, t, updates, "10.1.0.7")
}

// TestKubeconfigKube checks the kubeconfig a separate process would be given.
func TestKubeconfigKube(t *testing.T) {
	c := Start(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig(t))
	if err != nil {
		t.Fatalf("load kubeconfig: %v", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("server version through kubeconfig: %v", err)
	}
	if v.GitVersion != Version {
		t.Errorf("server version %s, want %s", v.GitVersion, Version)
	}
}

// TestToolsModulePinsVersion keeps Version, which names the cached binary, in step
// with the module that builds it; it needs no server, so the main suite runs it.
func TestToolsModulePinsVersion(t *testing.T) {
	b, err := tool.GoMod()
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if !strings.Contains(text, "k8s.io/kubernetes "+Version) {
		t.Errorf("%s/go.mod does not require k8s.io/kubernetes %s", toolsModule, Version)
	}
	staging := "v0" + strings.TrimPrefix(Version, "v1")
	for _, m := range regexp.MustCompile(`(?m)^\s*(k8s\.io/\S+) => (\S+) (\S+)$`).FindAllStringSubmatch(text, -1) {
		if m[1] != m[2] || m[3] != staging {
			t.Errorf("replace %s => %s %s: want %s => %s %s", m[1], m[2], m[3], m[1], m[1], staging)
		}
	}
}

func nodeSelector(node string) string {
	return fields.OneTermEqualSelector("spec.nodeName", node).String()
}

func mustCreateNamespace(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
}

func mustCreatePod(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name, node string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app:1"}},
		},
	}
	got, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	return got
}

// markReady does what the kubelet would: sets the pod Running, Ready, with an IP.
func markReady(ctx context.Context, t *testing.T, cs kubernetes.Interface, pod *corev1.Pod, ip string) {
	t.Helper()
	pod = pod.DeepCopy()
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = ip
	pod.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	pod.Status.Conditions = []corev1.PodCondition{{
		Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now(),
	}}
	if _, err := cs.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update status: %v", err)
	}
}

// watchNode runs an informer on the node's pods, as the agent does, and sends
// every pod it sees added or updated. It fails the test if a pod of another node
// arrives.
func watchNode(ctx context.Context, t *testing.T, cs kubernetes.Interface, node string) <-chan *corev1.Pod {
	t.Helper()
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = nodeSelector(node) }))
	inf := f.Core().V1().Pods().Informer()
	out := make(chan *corev1.Pod, 16)
	send := func(obj any) {
		pod := obj.(*corev1.Pod)
		if pod.Spec.NodeName != node {
			t.Errorf("informer for %s got pod %s of %s", node, pod.Name, pod.Spec.NodeName)
		}
		select {
		case out <- pod:
		case <-ctx.Done():
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: send, UpdateFunc: func(_, obj any) { send(obj) },
	}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	f.Start(stop)
	t.Cleanup(func() { close(stop); f.Shutdown() })
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatalf("pod informer did not sync within %s", waitTimeout)
	}
	return out
}

func waitForReadyIP(ctx context.Context, t *testing.T, updates <-chan *corev1.Pod, ip string) {
	t.Helper()
	for {
		select {
		case pod := <-updates:
			if isReady(pod) && len(pod.Status.PodIPs) == 1 && pod.Status.PodIPs[0].IP == ip {
				return
			}
		case <-ctx.Done():
			t.Fatalf("no ready pod with IP %s through the informer: %v", ip, ctx.Err())
		}
	}
}

func isReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podNames(pods []corev1.Pod) []string {
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = p.Namespace + "/" + p.Name
	}
	return out
}

// logRSS records the server's resident memory, which decides how many such tests
// can run side by side.
func logRSS(t *testing.T, pid int) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return // not Linux: nothing to report
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") || strings.HasPrefix(line, "VmHWM:") {
			t.Logf("kube-apiserver %s", strings.Join(strings.Fields(line), " "))
		}
	}
}
