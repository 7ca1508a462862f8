package kubesync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
)

// fieldManager names this package in the objects' managedFields.
const fieldManager = "switchboard-kubesync"

// callTimeout bounds each API call export makes, and each registry List when
// polling: one that hangs is given up and the sync retried with backoff, rather
// than holding a worker for ever. It is generous, as the client's own rate limit
// counts against it.
const callTimeout = 30 * time.Second

// exporter writes the selected registry services as Services and EndpointSlices
// in one namespace. Its key is a registry service name, which is also the
// Service's name.
type exporter struct {
	ns       string
	client   kubernetes.Interface
	services corelisters.ServiceNamespaceLister
	slices   discoverylisters.EndpointSliceNamespaceLister
	view     *view
	ctl      *controller
	notes    notes
	refused  refusals
	log      *slog.Logger
	m        *metrics
}

// onService queues a Service we own, or one whose name a registry service wants:
// a user deleting a Service that blocked ours lets ours be created.
func (e *exporter) onService(obj any) {
	if svc, ok := objectAs[*corev1.Service](obj); ok && (ownedService(svc) || e.view.has(svc.Name)) {
		e.ctl.enqueue(svc.Name)
	}
}

// onSlice queues the service of a slice we own, so one changed or deleted by
// someone else is put back.
func (e *exporter) onSlice(obj any) {
	if s, ok := objectAs[*discoveryv1.EndpointSlice](obj); ok && ownedSlice(s) {
		e.ctl.enqueue(sliceService(s))
	}
}

// resyncAll queues every service we export or have objects for.
func (e *exporter) resyncAll() {
	for _, svc := range e.view.services() {
		e.ctl.enqueue(svc)
	}
	if svcs, err := e.services.List(labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedBy})); err == nil {
		for _, s := range svcs {
			e.ctl.enqueue(s.Name)
		}
	}
	if sls, err := e.slices.List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelManagedBy: SliceManagedBy})); err == nil {
		for _, s := range sls {
			e.ctl.enqueue(sliceService(s))
		}
	}
}

// sync makes Kubernetes match the registry for one service: the Service and its
// slices when it has exportable endpoints, nothing of ours otherwise.
func (e *exporter) sync(ctx context.Context, svc string) (err error) {
	rec := e.refused.begin(svc)
	defer func() { e.refused.end(svc, rec, err != nil) }()
	if msgs := validation.IsDNS1035Label(svc); len(msgs) > 0 {
		// Registry names may hold upper case and '_', and be 253 long; a Service
		// name may not. There is nothing of ours to remove under such a name.
		var n []note
		if e.view.has(svc) {
			n = []note{{reason: reasonInvalidName, detail: strings.Join(msgs, "; ")}}
		}
		e.report(svc, n)
		return nil
	}
	plan := planExport(e.ns, svc, e.view.endpoints(svc))
	if plan.service == nil {
		if err := e.remove(ctx, svc); err != nil {
			return err
		}
		e.report(svc, plan.notes)
		return nil
	}
	owner, taken, err := e.ensureService(ctx, plan.service, rec)
	if err != nil {
		return err
	}
	n := plan.notes
	if owner == nil {
		// The name is a user's Service, or the API server refused ours: leave it,
		// and take away any slices of ours, which kube-proxy would add to the
		// user's and which would have no Service otherwise.
		if taken {
			n = append(n, note{reason: reasonConflict, kind: kindService, detail: svc})
		}
		if err := e.deleteSlices(ctx, svc, nil); err != nil {
			return err
		}
		e.report(svc, n)
		return nil
	}
	sn, err := e.syncSlices(ctx, svc, owner, plan.slices, rec)
	if err != nil {
		return err
	}
	e.report(svc, append(n, sn...))
	return nil
}

// report logs and counts the notes of svc not reported before.
func (e *exporter) report(svc string, n []note) {
	for _, f := range e.notes.replace(svc, n) {
		if f.reason == reasonConflict {
			e.m.conflicts.WithLabelValues(f.kind).Inc()
			e.log.Warn("name taken by an object kubesync does not own: leaving it alone", "service", svc, "kind", f.kind, "name", f.detail)
			continue
		}
		e.m.skipped.WithLabelValues(dirExport, f.reason).Inc()
		e.log.Warn("not exported", "service", svc, "reason", f.reason, "detail", f.detail)
	}
}

// ensureService creates or updates our Service and returns it. It returns nil
// and taken when the name belongs to a Service that is not ours, and nil alone
// when the API server refused to create ours. When it refused an update, the
// Service as it is is returned.
func (e *exporter) ensureService(ctx context.Context, want *corev1.Service, rec *refusalRecord) (owner *corev1.Service, taken bool, err error) {
	api := e.client.CoreV1().Services(e.ns)
	obj := kindService + "/" + want.Name
	cur, err := e.services.Get(want.Name)
	if apierrors.IsNotFound(err) {
		v := version("", want.Spec, want.Labels)
		if rec.known(obj, v) {
			return nil, false, nil
		}
		var got *corev1.Service
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		got, err = api.Create(cctx, want, metav1.CreateOptions{FieldManager: fieldManager})
		cancel()
		if err == nil {
			e.m.object(kindService, opCreated)
			e.log.Info("created Service", "service", want.Name, "ports", len(want.Spec.Ports))
			return got, false, nil
		}
		if apierrors.IsInvalid(err) {
			e.refusedWrite(rec, kindService, want.Name, v, err)
			return nil, false, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, false, fmt.Errorf("create Service %s: %w", want.Name, err)
		}
		// The cache has not seen it yet (our own create of a moment ago, or a
		// user's): decide on the live object.
		cctx, cancel = context.WithTimeout(ctx, callTimeout)
		cur, err = api.Get(cctx, want.Name, metav1.GetOptions{})
		cancel()
	}
	switch {
	case err != nil:
		return nil, false, fmt.Errorf("get Service %s: %w", want.Name, err)
	case !ownedService(cur):
		return nil, true, nil
	case serviceUpToDate(cur, want):
		return cur, false, nil
	}
	v := version(cur.ResourceVersion, want.Spec, want.Labels)
	if rec.known(obj, v) {
		return cur, false, nil
	}
	upd := cur.DeepCopy()
	upd.Labels = withLabels(upd.Labels, want.Labels)
	upd.Spec.Type, upd.Spec.Selector = want.Spec.Type, nil
	upd.Spec.Ports, upd.Spec.IPFamilyPolicy = want.Spec.Ports, want.Spec.IPFamilyPolicy
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	got, err := api.Update(cctx, upd, metav1.UpdateOptions{FieldManager: fieldManager})
	if apierrors.IsInvalid(err) {
		e.refusedWrite(rec, kindService, want.Name, v, err)
		return cur, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("update Service %s: %w", want.Name, err)
	}
	e.m.object(kindService, opUpdated)
	e.log.Info("updated Service", "service", want.Name, "ports", len(want.Spec.Ports))
	return got, false, nil
}

// serviceUpToDate compares what export sets; what the API server fills in (the
// cluster IP, defaults) is not ours to compare.
func serviceUpToDate(cur, want *corev1.Service) bool {
	return cur.Spec.Type == want.Spec.Type && len(cur.Spec.Selector) == 0 &&
		hasLabels(cur.Labels, want.Labels) &&
		apiequality.Semantic.DeepEqual(cur.Spec.IPFamilyPolicy, want.Spec.IPFamilyPolicy) &&
		apiequality.Semantic.DeepEqual(cur.Spec.Ports, want.Spec.Ports)
}

// syncSlices creates and updates the wanted slices, then deletes the other slices
// of ours for svc: in that order, so the Service never has no endpoints between
// two states that both have some.
func (e *exporter) syncSlices(ctx context.Context, svc string, owner *corev1.Service, want []*discoveryv1.EndpointSlice, rec *refusalRecord) ([]note, error) {
	ref := ownerRef(owner)
	keep := make(map[string]bool, len(want))
	var n []note
	var errs []error
	for _, w := range want {
		if ref != nil {
			w.OwnerReferences = []metav1.OwnerReference{*ref}
		}
		keep[w.Name] = true
		mine, err := e.ensureSlice(ctx, w, rec)
		if err != nil {
			errs = append(errs, err)
		} else if !mine {
			n = append(n, note{reason: reasonConflict, kind: kindSlice, detail: w.Name})
		}
	}
	errs = append(errs, e.deleteSlices(ctx, svc, keep))
	return n, errors.Join(errs...)
}

// ownerRef makes our Service the slices' owner, so Kubernetes deletes them with it.
// The fake clientset assigns no UIDs; a reference without one would be refused.
func ownerRef(owner *corev1.Service) *metav1.OwnerReference {
	if owner == nil || owner.UID == "" {
		return nil
	}
	yes := true
	return &metav1.OwnerReference{APIVersion: "v1", Kind: "Service", Name: owner.Name, UID: owner.UID, Controller: &yes}
}

// ensureSlice creates or updates one slice; it reports false when the name is
// taken by a slice that is not ours. A write the API server refuses as invalid is
// recorded in rec and is no error: it is not tried again until it changes.
func (e *exporter) ensureSlice(ctx context.Context, want *discoveryv1.EndpointSlice, rec *refusalRecord) (bool, error) {
	api := e.client.DiscoveryV1().EndpointSlices(e.ns)
	obj := kindSlice + "/" + want.Name
	content := []any{want.AddressType, want.Labels, want.OwnerReferences, want.Endpoints, want.Ports}
	cur, err := e.slices.Get(want.Name)
	if apierrors.IsNotFound(err) {
		v := version("", content...)
		if rec.known(obj, v) {
			return true, nil
		}
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		_, err = api.Create(cctx, want, metav1.CreateOptions{FieldManager: fieldManager})
		cancel()
		if err == nil {
			e.m.object(kindSlice, opCreated)
			e.log.Debug("created EndpointSlice", "slice", want.Name, "endpoints", len(want.Endpoints))
			return true, nil
		}
		if apierrors.IsInvalid(err) {
			e.refusedWrite(rec, kindSlice, want.Name, v, err)
			return true, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return true, fmt.Errorf("create EndpointSlice %s: %w", want.Name, err)
		}
		cctx, cancel = context.WithTimeout(ctx, callTimeout)
		cur, err = api.Get(cctx, want.Name, metav1.GetOptions{}) // the cache is behind
		cancel()
	}
	switch {
	case err != nil:
		return true, fmt.Errorf("get EndpointSlice %s: %w", want.Name, err)
	case !ownedSlice(cur):
		return false, nil
	case sliceUpToDate(cur, want):
		return true, nil
	}
	v := version(cur.ResourceVersion, content...)
	if rec.known(obj, v) {
		return true, nil
	}
	upd := cur.DeepCopy()
	upd.Labels = withLabels(upd.Labels, want.Labels)
	upd.OwnerReferences, upd.Endpoints, upd.Ports = want.OwnerReferences, want.Endpoints, want.Ports
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if _, err := api.Update(cctx, upd, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
		if apierrors.IsInvalid(err) {
			e.refusedWrite(rec, kindSlice, want.Name, v, err)
			return true, nil
		}
		return true, fmt.Errorf("update EndpointSlice %s: %w", want.Name, err)
	}
	e.m.object(kindSlice, opUpdated)
	e.log.Debug("updated EndpointSlice", "slice", want.Name, "endpoints", len(want.Endpoints))
	return true, nil
}

func sliceUpToDate(cur, want *discoveryv1.EndpointSlice) bool {
	return cur.AddressType == want.AddressType && hasLabels(cur.Labels, want.Labels) &&
		apiequality.Semantic.DeepEqual(cur.OwnerReferences, want.OwnerReferences) &&
		apiequality.Semantic.DeepEqual(cur.Ports, want.Ports) &&
		apiequality.Semantic.DeepEqual(cur.Endpoints, want.Endpoints)
}

// deleteSlices deletes our slices of svc whose names keep lacks.
func (e *exporter) deleteSlices(ctx context.Context, svc string, keep map[string]bool) error {
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: SliceManagedBy})
	have, err := e.slices.List(sel)
	if err != nil {
		return fmt.Errorf("list EndpointSlices of %s: %w", svc, err)
	}
	var errs []error
	for _, s := range have {
		if keep[s.Name] {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		err := e.client.DiscoveryV1().EndpointSlices(e.ns).Delete(cctx, s.Name, deleteOptions(s.UID))
		cancel()
		switch {
		case apierrors.IsNotFound(err): // deleted already; the cache is behind
		case err != nil:
			errs = append(errs, fmt.Errorf("delete EndpointSlice %s: %w", s.Name, err))
		default:
			e.m.object(kindSlice, opDeleted)
			e.log.Debug("deleted EndpointSlice", "slice", s.Name)
		}
	}
	return errors.Join(errs...)
}

// remove deletes our slices and Service of svc, which has nothing left to export.
func (e *exporter) remove(ctx context.Context, svc string) error {
	if err := e.deleteSlices(ctx, svc, nil); err != nil {
		return err
	}
	cur, err := e.services.Get(svc)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("get Service %s: %w", svc, err)
	case !ownedService(cur):
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	err = e.client.CoreV1().Services(e.ns).Delete(cctx, svc, deleteOptions(cur.UID))
	switch {
	case apierrors.IsNotFound(err):
		return nil // deleted already; the cache is behind
	case err != nil:
		return fmt.Errorf("delete Service %s: %w", svc, err)
	}
	e.m.object(kindService, opDeleted)
	e.log.Info("deleted Service: no endpoints left in the registry", "service", svc)
	return nil
}
