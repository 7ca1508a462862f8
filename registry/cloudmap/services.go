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
)

// serviceName maps an endpoint service name to a Cloud Map service name. Cloud Map
// wants DNS-style labels (at most 63 characters, no trailing '-'); endpoint names may
// be longer or end in '-'. Those become "<prefix>.<fnv64 hex of the full name>": the
// '.' cannot occur in an endpoint name, so a mapped name never collides with a name
// used as is.
func serviceName(service string) string {
	if len(service) <= 63 && !strings.HasSuffix(service, "-") {
		return service
	}
	prefix := strings.TrimRight(service[:min(len(service), 46)], "-")
	return fmt.Sprintf("%s.%016x", prefix, fnv64(service))
}

func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * 1099511628211
	}
	return h
}

// serviceCache maps Cloud Map service names to ids. Reads take the fast path;
// refreshes and creations are serialised by slow so that a batch of 300 writes to a
// new service creates it once.
type serviceCache struct {
	mu   sync.RWMutex
	ids  map[string]string
	slow sync.Mutex
}

func (c *serviceCache) get(name string) (string, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	id, ok := c.ids[name]
	return id, ok
}

func (c *serviceCache) set(name, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ids[name] = id
}

func (c *serviceCache) forget(name, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ids[name] == id {
		delete(c.ids, name)
	}
}

func (c *serviceCache) forgetID(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, v := range c.ids {
		if v == id {
			delete(c.ids, name)
		}
	}
}

func (c *serviceCache) replace(ids map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ids = ids
}

// serviceID returns the id of the Cloud Map service holding the endpoint service's
// instances; ok is false when there is none and create is false.
func (r *driver) serviceID(ctx context.Context, service string, create bool) (id string, ok bool, err error) {
	name := serviceName(service)
	if id, ok := r.services.get(name); ok {
		return id, true, nil
	}
	r.services.slow.Lock()
	defer r.services.slow.Unlock()
	if id, ok := r.services.get(name); ok {
		return id, true, nil // another caller resolved it while we waited
	}
	all, err := r.listServices(ctx)
	if err != nil {
		return "", false, err
	}
	if id, ok := all[name]; ok {
		return id, true, nil
	}
	if !create {
		return "", false, nil
	}
	id, err = r.createService(ctx, service, name)
	if err != nil {
		return "", false, err
	}
	r.services.set(name, id)
	return id, true, nil
}

// listServices reads every service of the namespace and refreshes the cache with
// them, dropping services deleted behind our back.
func (r *driver) listServices(ctx context.Context) (map[string]string, error) {
	ids := map[string]string{}
	p := sd.NewListServicesPaginator(r.client, &sd.ListServicesInput{Filters: []types.ServiceFilter{{
		Name: types.ServiceFilterNameNamespaceId, Values: []string{r.nsID}, Condition: types.FilterConditionEq,
	}}})
	for p.HasMorePages() {
		out, err := call(ctx, r, func(ctx context.Context) (*sd.ListServicesOutput, error) { return p.NextPage(ctx) })
		if err != nil {
			return nil, fmt.Errorf("list Cloud Map services: %w", err)
		}
		for _, s := range out.Services {
			ids[aws.ToString(s.Name)] = aws.ToString(s.Id)
		}
	}
	r.services.replace(ids)
	return ids, nil
}

func (r *driver) createService(ctx context.Context, service, name string) (string, error) {
	out, err := call(ctx, r, func(ctx context.Context) (*sd.CreateServiceOutput, error) {
		return r.client.CreateService(ctx, &sd.CreateServiceInput{
			Name:        aws.String(name),
			NamespaceId: aws.String(r.nsID),
			Type:        types.ServiceTypeOptionHttp,
			Description: aws.String("switchboard endpoints of service " + service),
		})
	})
	var exists *types.ServiceAlreadyExists
	switch {
	case errors.As(err, &exists) && aws.ToString(exists.ServiceId) != "":
		return aws.ToString(exists.ServiceId), nil // created concurrently elsewhere
	case err != nil:
		return "", fmt.Errorf("create Cloud Map service %s: %w", name, err)
	}
	r.log.Info("created Cloud Map service", "name", name, "id", aws.ToString(out.Service.Id))
	return aws.ToString(out.Service.Id), nil
}

// resolveNamespace finds the namespace by id or name, creating an HTTP namespace of
// that name if asked to.
func (r *driver) resolveNamespace(ctx context.Context, ref string, create bool) (string, error) {
	if strings.HasPrefix(ref, "ns-") {
		out, err := call(ctx, r, func(ctx context.Context) (*sd.GetNamespaceOutput, error) {
			return r.client.GetNamespace(ctx, &sd.GetNamespaceInput{Id: aws.String(ref)})
		})
		var nf *types.NamespaceNotFound
		switch {
		case err == nil:
			return aws.ToString(out.Namespace.Id), nil
		case !errors.As(err, &nf):
			return "", fmt.Errorf("get Cloud Map namespace %s: %w", ref, err)
		} // not an id after all: try it as a name
	}
	id, err := r.findNamespace(ctx, ref)
	switch {
	case err != nil || id != "":
		return id, err
	case !create:
		return "", fmt.Errorf("Cloud Map namespace %q not found (create it, or set cloudmap-create-namespace)", ref)
	}
	return r.createNamespace(ctx, ref)
}

func (r *driver) findNamespace(ctx context.Context, name string) (string, error) {
	var ids []string
	p := sd.NewListNamespacesPaginator(r.client, &sd.ListNamespacesInput{Filters: []types.NamespaceFilter{{
		Name: types.NamespaceFilterNameName, Values: []string{name}, Condition: types.FilterConditionEq,
	}}})
	for p.HasMorePages() {
		out, err := call(ctx, r, func(ctx context.Context) (*sd.ListNamespacesOutput, error) { return p.NextPage(ctx) })
		if err != nil {
			return "", fmt.Errorf("list Cloud Map namespaces: %w", err)
		}
		for _, ns := range out.Namespaces {
			if aws.ToString(ns.Name) == name {
				ids = append(ids, aws.ToString(ns.Id))
			}
		}
	}
	if len(ids) > 1 {
		return "", fmt.Errorf("Cloud Map namespace name %q is ambiguous (%s): pass the id instead", name, strings.Join(ids, ", "))
	}
	if len(ids) == 0 {
		return "", nil
	}
	return ids[0], nil
}

func (r *driver) createNamespace(ctx context.Context, name string) (string, error) {
	out, err := call(ctx, r, func(ctx context.Context) (*sd.CreateHttpNamespaceOutput, error) {
		return r.client.CreateHttpNamespace(ctx, &sd.CreateHttpNamespaceInput{
			Name: aws.String(name), Description: aws.String("switchboard endpoints"),
		})
	})
	var exists *types.NamespaceAlreadyExists
	switch {
	case errors.As(err, &exists) && aws.ToString(exists.NamespaceId) != "":
		return aws.ToString(exists.NamespaceId), nil
	case err != nil:
		return "", fmt.Errorf("create Cloud Map namespace %s: %w", name, err)
	}
	op, err := r.await(ctx, aws.ToString(out.OperationId))
	if err != nil {
		return "", fmt.Errorf("create Cloud Map namespace %s: %w", name, err)
	}
	id := op.Targets[string(types.OperationTargetTypeNamespace)]
	if id == "" {
		return "", fmt.Errorf("create Cloud Map namespace %s: operation %s names no namespace", name, aws.ToString(op.Id))
	}
	r.log.Info("created Cloud Map namespace", "name", name, "id", id)
	return id, nil
}
