package kubesync

import (
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// objectAs unwraps an informer's object: the object itself, or the last state of
// one whose deletion the informer learned of late.
func objectAs[T any](obj any) (T, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	t, ok := obj.(T)
	return t, ok
}

// handler calls f with every object an informer reports added, changed (old and
// new, as a label may have moved it) or deleted.
func handler(f func(any)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: f,
		UpdateFunc: func(old, cur any) {
			f(old)
			f(cur)
		},
		DeleteFunc: f,
	}
}

// hasLabels reports whether have holds every label of want.
func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if w, ok := have[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// withLabels returns have with want's labels set, keeping the others: someone may
// label our objects for their own purposes.
func withLabels(have, want map[string]string) map[string]string {
	out := maps.Clone(have)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, want)
	return out
}

// deleteOptions deletes only the object with uid, so an object a user created
// under the same name since the cache saw ours is never deleted. The fake
// clientset assigns no UIDs: then there is nothing to hold the delete to.
func deleteOptions(uid types.UID) metav1.DeleteOptions {
	if uid == "" {
		return metav1.DeleteOptions{}
	}
	return metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(uid))}
}
