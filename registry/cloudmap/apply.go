package cloudmap

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"
	"github.com/aws/aws-sdk-go-v2/service/servicediscovery/types"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// write is one coalesced op on its way to Cloud Map.
type write struct {
	op    registry.Op
	key   endpoint.Key
	id    string            // instance id
	attrs map[string]string // for registrations
	svc   resolved          // the Cloud Map service of the key's service
}

// resolved is the outcome of looking up (or creating) one Cloud Map service.
type resolved struct {
	id  string // "" when there is none (only for unregister-only services)
	err error
}

// Apply registers and deregisters the batch's instances concurrently, waiting for
// each asynchronous operation to finish. Keys that were not written are reported in a
// *registry.ApplyError; the others are.
func (r *driver) Apply(ctx context.Context, ops []registry.Op) error {
	writes, err := r.prepare(ops)
	if err != nil {
		return err
	}
	ids := make([]string, len(writes))
	for i, w := range writes {
		ids[i] = w.id
	}
	r.busy.add(ids)
	defer r.busy.remove(ids)

	r.resolveServices(ctx, writes)
	errs := make([]error, len(writes))
	var wg sync.WaitGroup
	for i := range writes {
		wg.Go(func() { errs[i] = r.write(ctx, &writes[i]) })
	}
	wg.Wait()
	return applyError(writes, errs)
}

// prepare encodes every registration before anything is sent, so an endpoint Cloud
// Map cannot hold fails the batch without writing any of it.
func (r *driver) prepare(ops []registry.Op) ([]write, error) {
	now := r.opts.Now()
	writes := make([]write, len(ops))
	for i, op := range ops {
		w := write{op: op, key: op.Endpoint.Key()}
		w.id = w.key.InstanceID()
		if op.Kind == registry.OpRegister {
			attrs, err := encode(op.Endpoint, now)
			if err != nil {
				return nil, &registry.ApplyError{Failed: []endpoint.Key{w.key}, Err: fmt.Errorf("register %s: %w", w.key, err)}
			}
			w.attrs = attrs
		}
		writes[i] = w
	}
	return writes, nil
}

// resolveServices looks up each service of the batch once — creating those that
// receive registrations — so a batch of 300 writes to one service costs one lookup,
// and a failing lookup fails its writes without being repeated for each.
func (r *driver) resolveServices(ctx context.Context, writes []write) {
	create := map[string]bool{}
	for _, w := range writes {
		create[w.key.Service] = create[w.key.Service] || w.op.Kind == registry.OpRegister
	}
	found := make(map[string]resolved, len(create))
	for service, c := range create {
		id, _, err := r.serviceID(ctx, service, c)
		found[service] = resolved{id, err}
	}
	for i := range writes {
		writes[i].svc = found[writes[i].key.Service]
	}
}

func (r *driver) write(ctx context.Context, w *write) error {
	if w.svc.err != nil {
		return w.svc.err
	}
	if w.op.Kind == registry.OpRegister {
		return r.register(ctx, w, w.svc.id, true)
	}
	return r.deregister(ctx, w)
}

func (r *driver) register(ctx context.Context, w *write, svcID string, retry bool) error {
	out, err := call(ctx, r, func(ctx context.Context) (*sd.RegisterInstanceOutput, error) {
		return r.client.RegisterInstance(ctx, &sd.RegisterInstanceInput{
			ServiceId: aws.String(svcID), InstanceId: aws.String(w.id), Attributes: w.attrs,
		})
	})
	var gone *types.ServiceNotFound
	switch {
	case errors.As(err, &gone) && retry:
		// Deleted behind our back since we cached its id: recreate it, once.
		r.services.forget(serviceName(w.key.Service), svcID)
		newID, _, err := r.serviceID(ctx, w.key.Service, true)
		if err != nil {
			return err
		}
		return r.register(ctx, w, newID, false)
	case err != nil:
		return fmt.Errorf("RegisterInstance: %w", err)
	}
	_, err = r.await(ctx, aws.ToString(out.OperationId))
	return err
}

func (r *driver) deregister(ctx context.Context, w *write) error {
	if w.svc.id == "" {
		return nil // no service, so no instance to remove
	}
	opID, err := r.submitDeregister(ctx, w.svc.id, w.id)
	if err != nil || opID == "" {
		return err
	}
	_, err = r.await(ctx, opID)
	return err
}

// submitDeregister starts a deregistration; an empty operation id means the
// instance (or its whole service) is already gone.
func (r *driver) submitDeregister(ctx context.Context, svcID, instanceID string) (string, error) {
	out, err := call(ctx, r, func(ctx context.Context) (*sd.DeregisterInstanceOutput, error) {
		return r.client.DeregisterInstance(ctx, &sd.DeregisterInstanceInput{
			ServiceId: aws.String(svcID), InstanceId: aws.String(instanceID),
		})
	})
	var noInstance *types.InstanceNotFound
	var noService *types.ServiceNotFound
	switch {
	case errors.As(err, &noInstance) || errors.As(err, &noService):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("DeregisterInstance: %w", err)
	}
	return aws.ToString(out.OperationId), nil
}

// applyError gathers the keys that were not written, in batch order.
func applyError(writes []write, errs []error) error {
	var failed []endpoint.Key
	var why keyErrors
	for i, err := range errs {
		if err != nil {
			failed = append(failed, writes[i].key)
			why = append(why, fmt.Errorf("%s %s: %w", writes[i].op.Kind, writes[i].key, err))
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return &registry.ApplyError{Failed: failed, Err: why}
}

// keyErrors is one error per failed key; errors.Is and errors.As see all of them.
type keyErrors []error

func (e keyErrors) Error() string {
	const show = 3
	parts := make([]string, 0, show+1)
	for i, err := range e {
		if i == show {
			parts = append(parts, fmt.Sprintf("and %d more", len(e)-show))
			break
		}
		parts = append(parts, err.Error())
	}
	return strings.Join(parts, "; ")
}

func (e keyErrors) Unwrap() []error { return e }
