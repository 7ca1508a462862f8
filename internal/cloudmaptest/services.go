package cloudmaptest

import (
	"maps"
	"regexp"
	"slices"
	"time"
)

type service struct {
	id, name, namespaceID, description, creatorRequestID string
	created                                              time.Time
	instances                                            map[string]map[string]string // id -> attributes
	order                                                []string                     // instance ids, sorted
}

// serviceNameRE is Cloud Map's service name rule: DNS-style labels of at most 63
// characters that neither start nor end with a hyphen, 127 characters in all.
var serviceNameRE = regexp.MustCompile(`^([a-zA-Z0-9_][a-zA-Z0-9_-]{0,61}[a-zA-Z0-9_]|[a-zA-Z0-9])(\.([a-zA-Z0-9_][a-zA-Z0-9_-]{0,61}[a-zA-Z0-9_]|[a-zA-Z0-9]))*$`)

func (s *Server) createService(body []byte) (any, error) {
	var in struct {
		Name             string
		NamespaceId      *string
		CreatorRequestId *string
		Description      *string
		Type             *string
		Tags             []map[string]string
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	if len(in.Name) > 127 || !serviceNameRE.MatchString(in.Name) {
		return nil, invalid("service name %q is not valid", in.Name)
	}
	if in.Type != nil && *in.Type != "HTTP" {
		return nil, invalid("service type %q: the fake supports only HTTP", *in.Type)
	}
	ns, ok := s.namespaces[deref(in.NamespaceId)]
	if !ok || !ns.live {
		return nil, notFound("NamespaceNotFound", "namespace %q not found", deref(in.NamespaceId))
	}
	// HTTP namespaces are reached only through the API, where names are case-sensitive.
	for _, svc := range s.services {
		if svc.namespaceID == ns.id && svc.name == in.Name {
			return nil, &apiError{status: 400, code: "ServiceAlreadyExists", msg: "service " + in.Name + " already exists",
				extra: map[string]string{"ServiceId": svc.id, "ServiceArn": s.arn("service", svc.id), "CreatorRequestId": svc.creatorRequestID}}
		}
	}
	svc := &service{
		id: s.nextID("srv-"), name: in.Name, namespaceID: ns.id, description: deref(in.Description),
		creatorRequestID: deref(in.CreatorRequestId), created: time.Now(), instances: map[string]map[string]string{},
	}
	s.services[svc.id] = svc
	return map[string]any{"Service": s.serviceJSON(svc)}, nil
}

func (s *Server) listServices(body []byte) (any, error) {
	var in struct {
		Filters    []filter
		MaxResults *int
		NextToken  *string
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	limit, err := s.pageLimit(in.MaxResults)
	if err != nil {
		return nil, err
	}
	ids := slices.Sorted(maps.Keys(s.services))
	window, next, err := page(ids, in.NextToken, "srv", limit)
	if err != nil {
		return nil, err
	}
	out := []any{}
	for _, id := range window {
		svc := s.services[id]
		ok, err := svc.matches(in.Filters)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, s.serviceJSON(svc))
		}
	}
	return map[string]any{"Services": out, "NextToken": next}, nil
}

func (svc *service) matches(filters []filter) (bool, error) {
	for _, f := range filters {
		if f.Name != "NAMESPACE_ID" {
			return false, invalid("service filter %q is not supported", f.Name)
		}
		ok, err := f.match(svc.namespaceID)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

func (s *Server) serviceJSON(svc *service) map[string]any {
	return map[string]any{
		"Id": svc.id, "Arn": s.arn("service", svc.id), "Name": svc.name, "NamespaceId": svc.namespaceID,
		"Description": svc.description, "InstanceCount": len(svc.instances), "Type": "HTTP",
		"CreateDate": epoch(svc.created), "CreatorRequestId": svc.creatorRequestID,
	}
}

// lookupService finds a service by id or ARN.
func (s *Server) lookupService(idOrARN string) (*service, error) {
	if svc, ok := s.services[idOrARN]; ok {
		return svc, nil
	}
	for _, svc := range s.services {
		if s.arn("service", svc.id) == idOrARN {
			return svc, nil
		}
	}
	return nil, notFound("ServiceNotFound", "service %q not found", idOrARN)
}
