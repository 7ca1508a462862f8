package kubesync

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Labels and annotations that mark what this package owns. Ownership is read from
// them alone: an object without them is a user's, and is never changed or deleted.
const (
	// LabelManagedBy and ManagedBy mark the Services (and slices) export creates.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "switchboard-kubesync"
	// SliceManagedBy is the endpointslice.kubernetes.io/managed-by value of the
	// slices export creates; the EndpointSlice controller leaves slices with another
	// value alone, and import skips slices with this one.
	SliceManagedBy = "kubesync.switchboard.dev"

	// AnnotationOrigin marks a registry entry import wrote; export skips such
	// entries of its own cluster.
	AnnotationOrigin = "switchboard.dev/origin"
	OriginKubernetes = "kubernetes"
	// AnnotationNamespace and AnnotationService say where an imported entry came from.
	AnnotationNamespace = "k8s.namespace"
	AnnotationService   = "k8s.service"
)

// ownedService reports whether export created svc.
func ownedService(svc *corev1.Service) bool {
	return svc.Labels[LabelManagedBy] == ManagedBy
}

// ownedSlice reports whether export created s.
func ownedSlice(s *discoveryv1.EndpointSlice) bool {
	return s.Labels[discoveryv1.LabelManagedBy] == SliceManagedBy
}

// sliceService is the Service a slice belongs to, "" when it names none.
func sliceService(s *discoveryv1.EndpointSlice) string {
	return s.Labels[discoveryv1.LabelServiceName]
}
