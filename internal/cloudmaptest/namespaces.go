package cloudmaptest

import (
	"maps"
	"regexp"
	"slices"
	"time"
)

type namespace struct {
	id, name, description, creatorRequestID string
	created                                 time.Time
	live                                    bool // false until its CREATE_NAMESPACE operation succeeds
}

// nsNameRE is the HTTP namespace name rule: printable ASCII, not an ARN.
var nsNameRE = regexp.MustCompile(`^[!-~]+$`)

func (s *Server) createHTTPNamespace(body []byte) (any, error) {
	var in struct {
		Name             string
		CreatorRequestId *string
		Description      *string
		Tags             []map[string]string
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	if len(in.Name) > 1024 || !nsNameRE.MatchString(in.Name) || len(in.Name) >= 4 && in.Name[:4] == "arn:" {
		return nil, invalid("namespace name %q is not valid", in.Name)
	}
	for _, ns := range s.namespaces {
		if ns.name != in.Name {
			continue
		}
		if in.CreatorRequestId != nil && ns.creatorRequestID == *in.CreatorRequestId {
			if opID, ok := s.requests[*in.CreatorRequestId]; ok {
				return operationOutput(s.ops[opID]), nil // an idempotent retry
			}
		}
		return nil, &apiError{status: 400, code: "NamespaceAlreadyExists", msg: "namespace " + in.Name + " already exists",
			extra: map[string]string{"NamespaceId": ns.id, "CreatorRequestId": ns.creatorRequestID}}
	}
	ns := &namespace{id: s.nextID("ns-"), name: in.Name, description: deref(in.Description), created: time.Now()}
	ns.creatorRequestID = deref(in.CreatorRequestId)
	s.namespaces[ns.id] = ns
	op := s.submit("CREATE_NAMESPACE", "", map[string]string{"NAMESPACE": ns.id}, func() { ns.live = true })
	if ns.creatorRequestID != "" {
		s.requests[ns.creatorRequestID] = op.id
	}
	return operationOutput(op), nil
}

func (s *Server) getNamespace(body []byte) (any, error) {
	var in struct{ Id string }
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	ns, ok := s.namespaces[in.Id]
	if !ok || !ns.live {
		return nil, notFound("NamespaceNotFound", "namespace %q not found", in.Id)
	}
	return map[string]any{"Namespace": s.namespaceJSON(ns)}, nil
}

func (s *Server) listNamespaces(body []byte) (any, error) {
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
	ids := slices.Sorted(maps.Keys(s.namespaces))
	window, next, err := page(ids, in.NextToken, "ns", limit)
	if err != nil {
		return nil, err
	}
	// Like Cloud Map, read a page and then filter it: a page may come back empty.
	out := []any{}
	for _, id := range window {
		ns := s.namespaces[id]
		ok, err := ns.matches(in.Filters)
		if err != nil {
			return nil, err
		}
		if ok && ns.live {
			out = append(out, s.namespaceJSON(ns))
		}
	}
	return map[string]any{"Namespaces": out, "NextToken": next}, nil
}

func (ns *namespace) matches(filters []filter) (bool, error) {
	for _, f := range filters {
		var v string
		switch f.Name {
		case "NAME", "HTTP_NAME":
			v = ns.name
		case "TYPE":
			v = "HTTP"
		default:
			return false, invalid("namespace filter %q is not supported", f.Name)
		}
		ok, err := f.match(v)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

func (s *Server) namespaceJSON(ns *namespace) map[string]any {
	count := 0
	for _, svc := range s.services {
		if svc.namespaceID == ns.id {
			count++
		}
	}
	return map[string]any{
		"Id": ns.id, "Arn": s.arn("namespace", ns.id), "Name": ns.name, "Type": "HTTP",
		"Description": ns.description, "ServiceCount": count, "CreateDate": epoch(ns.created),
		"CreatorRequestId": ns.creatorRequestID,
		"Properties":       map[string]any{"HttpProperties": map[string]string{"HttpName": ns.name}},
	}
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
