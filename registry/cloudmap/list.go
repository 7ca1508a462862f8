package cloudmap

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"
	"github.com/aws/aws-sdk-go-v2/service/servicediscovery/types"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// pageSize is Cloud Map's largest ListInstances page.
const pageSize = 100

// List reads the live endpoints of the services f selects with ListInstances, one
// Cloud Map service per endpoint service; the registry.Front keeps those f matches
// and sorts them. Expired instances are left out and queued for the reaper.
func (r *driver) List(ctx context.Context, f endpoint.Filter) ([]endpoint.Endpoint, error) {
	svcIDs, err := r.servicesFor(ctx, f)
	if err != nil {
		return nil, err
	}
	found := make([][]endpoint.Endpoint, len(svcIDs))
	errs := make([]error, len(svcIDs))
	var wg sync.WaitGroup
	for i, id := range svcIDs {
		wg.Go(func() { found[i], errs[i] = r.listService(ctx, id) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := slices.Concat(found...)
	if out == nil {
		out = []endpoint.Endpoint{}
	}
	return out, nil
}

// servicesFor returns the ids of the Cloud Map services that can hold matches.
func (r *driver) servicesFor(ctx context.Context, f endpoint.Filter) ([]string, error) {
	if f.Service != "" {
		id, ok, err := r.serviceID(ctx, f.Service, false)
		if err != nil || !ok {
			return nil, err
		}
		return []string{id}, nil
	}
	all, err := r.listServices(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(all))
	for _, id := range all {
		ids = append(ids, id)
	}
	return ids, nil
}

// listService pages through one service's live instances.
func (r *driver) listService(ctx context.Context, svcID string) ([]endpoint.Endpoint, error) {
	now := r.opts.Now()
	var out []endpoint.Endpoint
	p := sd.NewListInstancesPaginator(r.client, &sd.ListInstancesInput{ServiceId: aws.String(svcID), MaxResults: aws.Int32(pageSize)})
	for p.HasMorePages() {
		page, err := call(ctx, r, func(ctx context.Context) (*sd.ListInstancesOutput, error) { return p.NextPage(ctx) })
		var gone *types.ServiceNotFound
		switch {
		case errors.As(err, &gone):
			r.services.forgetID(svcID)
			return nil, nil // deleted since we listed the services: nothing in it
		case err != nil:
			return nil, fmt.Errorf("list instances of Cloud Map service %s: %w", svcID, err)
		}
		for _, in := range page.Instances {
			id := aws.ToString(in.Id)
			d, err := decode(id, in.Attributes)
			switch {
			case err != nil:
				r.log.Debug("skipping Cloud Map instance that is not a switchboard endpoint", "service", svcID, "instance", id, "err", err)
			case d.expired(now):
				r.enqueueReap(svcID, id)
			default:
				out = append(out, d.ep)
			}
		}
	}
	return out, nil
}
