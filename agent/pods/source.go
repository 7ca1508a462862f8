package pods

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// podSource is the node's pods as the API server has them: an informer that lists
// and watches the pods with spec.nodeName=<node> only, so that an agent holds its own
// node's pods and not the cluster's.
type podSource struct {
	factory  informers.SharedInformerFactory
	informer cache.SharedIndexInformer
	handler  cache.ResourceEventHandlerRegistration
	node     string
}

// newPodSource prepares the informer; onEvent is called (without blocking for long:
// it must only nudge) on every add, update, delete and resync.
func newPodSource(client kubernetes.Interface, node string, resync time.Duration, onEvent func()) (*podSource, error) {
	// client-go raises a resync period under a second to one, and says so in its own
	// log; the reconciler's ticker keeps the shorter period anyway.
	resync = max(resync, time.Second)
	f := informers.NewSharedInformerFactoryWithOptions(client, resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
		}),
		informers.WithTransform(stripManagedFields))
	inf := f.Core().V1().Pods().Informer()
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { onEvent() },
		UpdateFunc: func(any, any) { onEvent() },
		DeleteFunc: func(any) { onEvent() },
	})
	if err != nil {
		return nil, fmt.Errorf("pod informer: %w", err)
	}
	return &podSource{factory: f, informer: inf, handler: reg, node: node}, nil
}

// stripManagedFields drops what the agent never reads and a pod carries most of:
// an informer holds every pod of the node for as long as the agent runs.
func stripManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// start runs the informer until stop closes; shutdown waits for it after that.
func (s *podSource) start(stop <-chan struct{}) { s.factory.Start(stop) }

// shutdown returns once the informer's goroutines have ended; stop must be closed.
func (s *podSource) shutdown() { s.factory.Shutdown() }

// Synced reports whether the first list is in the informer's store: before that, a
// pod missing from it may well exist. It asks the handler's registration, not the
// informer: the informer says synced once its queue has handed out the last listed
// pod, before that pod is in the store, and a reconciler that believed it would take
// a live pod for a gone one.
func (s *podSource) Synced() bool { return s.handler.HasSynced() }

// pods returns the node's pods. The node is checked again here: the field selector
// is the API server's filter, and a client that ignores it (the fake clientset does)
// must not make another node's pods ours.
func (s *podSource) pods() []*corev1.Pod {
	objs := s.informer.GetStore().List()
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok && p.Spec.NodeName == s.node {
			out = append(out, p)
		}
	}
	return out
}
