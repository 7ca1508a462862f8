package cloudmaptest

import (
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Cloud Map's documented limits on RegisterInstance input.
const (
	maxInstanceID      = 64
	maxAttrKey         = 255
	maxAttrValue       = 1024
	maxAttrTotal       = 5000
	attrIPv4, attrIPv6 = "AWS_INSTANCE_IPV4", "AWS_INSTANCE_IPV6"
	attrPort           = "AWS_INSTANCE_PORT"
)

var (
	instanceIDRE = regexp.MustCompile(`^[0-9a-zA-Z_/:.@-]+$`)
	attrKeyRE    = regexp.MustCompile(`^[a-zA-Z0-9!-~]+$`)
)

func (s *Server) registerInstance(body []byte) (any, error) {
	var in struct {
		ServiceId        string
		InstanceId       string
		CreatorRequestId *string
		Attributes       map[string]string
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	svc, err := s.lookupService(in.ServiceId)
	if err != nil {
		return nil, err
	}
	if in.Attributes == nil {
		return nil, invalid("Attributes is required")
	}
	if err := checkInstance(in.InstanceId, in.Attributes); err != nil {
		return nil, err
	}
	// A retry carrying the same creator request id gets the operation it already started.
	if in.CreatorRequestId != nil {
		if opID, ok := s.requests[*in.CreatorRequestId]; ok {
			return operationOutput(s.ops[opID]), nil
		}
	}
	id, attrs := in.InstanceId, maps.Clone(in.Attributes)
	op := s.submit("REGISTER_INSTANCE", id, s.instanceTargets(svc, id), func() { svc.put(id, attrs) })
	if in.CreatorRequestId != nil {
		s.requests[*in.CreatorRequestId] = op.id
	}
	return operationOutput(op), nil
}

func checkInstance(id string, attrs map[string]string) error {
	if len(id) == 0 || len(id) > maxInstanceID || !instanceIDRE.MatchString(id) {
		return invalid("InstanceId %q is not valid", id)
	}
	total := 0
	for k, v := range attrs {
		if len(k) > maxAttrKey || !attrKeyRE.MatchString(k) {
			return invalid("attribute key %q is not valid", k)
		}
		if utf8.RuneCountInString(v) > maxAttrValue {
			return invalid("attribute %s: value longer than %d characters", k, maxAttrValue)
		}
		total += utf8.RuneCountInString(k) + utf8.RuneCountInString(v)
	}
	if total > maxAttrTotal {
		return invalid("attributes total %d characters, more than %d", total, maxAttrTotal)
	}
	return checkAWSAttributes(attrs)
}

func checkAWSAttributes(attrs map[string]string) error {
	if v, ok := attrs[attrIPv4]; ok {
		if a, err := netip.ParseAddr(v); err != nil || !a.Is4() {
			return invalid("%s %q is not an IPv4 address", attrIPv4, v)
		}
	}
	if v, ok := attrs[attrIPv6]; ok {
		if a, err := netip.ParseAddr(v); err != nil || !a.Is6() {
			return invalid("%s %q is not an IPv6 address", attrIPv6, v)
		}
	}
	if v, ok := attrs[attrPort]; ok {
		if p, err := strconv.Atoi(v); err != nil || p < 0 || p > 65535 {
			return invalid("%s %q is not a port", attrPort, v)
		}
	}
	return nil
}

func (s *Server) deregisterInstance(body []byte) (any, error) {
	var in struct{ ServiceId, InstanceId string }
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	svc, err := s.lookupService(in.ServiceId)
	if err != nil {
		return nil, err
	}
	id := in.InstanceId
	if _, ok := svc.instances[id]; !ok && !s.pendingRegister(svc.id, id) {
		return nil, notFound("InstanceNotFound", "instance %q not found in service %s", id, svc.id)
	}
	op := s.submit("DEREGISTER_INSTANCE", id, s.instanceTargets(svc, id), func() { svc.remove(id) })
	return operationOutput(op), nil
}

func (s *Server) instanceTargets(svc *service, id string) map[string]string {
	return map[string]string{"NAMESPACE": svc.namespaceID, "SERVICE": svc.id, "INSTANCE": id}
}

func (s *Server) getInstance(body []byte) (any, error) {
	var in struct{ ServiceId, InstanceId string }
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	svc, err := s.lookupService(in.ServiceId)
	if err != nil {
		return nil, err
	}
	attrs, ok := svc.instances[in.InstanceId]
	if !ok {
		return nil, notFound("InstanceNotFound", "instance %q not found in service %s", in.InstanceId, svc.id)
	}
	return map[string]any{
		"Instance":      map[string]any{"Id": in.InstanceId, "Attributes": attrs},
		"ResourceOwner": s.opts.Account,
	}, nil
}

func (s *Server) listInstances(body []byte) (any, error) {
	var in struct {
		ServiceId  string
		MaxResults *int
		NextToken  *string
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	svc, err := s.lookupService(in.ServiceId)
	if err != nil {
		return nil, err
	}
	limit, err := s.pageLimit(in.MaxResults)
	if err != nil {
		return nil, err
	}
	window, next, err := page(svc.order, in.NextToken, "inst:"+svc.id, limit)
	if err != nil {
		return nil, err
	}
	out := make([]any, 0, len(window))
	for _, id := range window {
		out = append(out, map[string]any{"Id": id, "Attributes": svc.instances[id], "CreatedByAccount": s.opts.Account})
	}
	return map[string]any{"Instances": out, "NextToken": next, "ResourceOwner": s.opts.Account}, nil
}

// Instance returns a copy of a stored instance's attributes, searching every service:
// tests use it to see what really reached Cloud Map.
func (s *Server) Instance(instanceID string) (map[string]string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, svc := range s.services {
		if attrs, ok := svc.instances[instanceID]; ok {
			return maps.Clone(attrs), true
		}
	}
	return nil, false
}

// InstanceCount returns how many instances are stored across every service.
func (s *Server) InstanceCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, svc := range s.services {
		n += len(svc.instances)
	}
	return n
}

// ServiceNames returns the names of the services of a namespace, sorted.
func (s *Server) ServiceNames(namespaceID string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for _, svc := range s.services {
		if svc.namespaceID == namespaceID {
			names = append(names, svc.name)
		}
	}
	slices.Sort(names)
	return names
}

// put stores an instance, keeping the sorted id list that paging walks.
func (svc *service) put(id string, attrs map[string]string) {
	if _, ok := svc.instances[id]; !ok {
		i, _ := slices.BinarySearch(svc.order, id)
		svc.order = slices.Insert(svc.order, i, id)
	}
	svc.instances[id] = attrs
}

func (svc *service) remove(id string) {
	if _, ok := svc.instances[id]; !ok {
		return
	}
	delete(svc.instances, id)
	if i, found := slices.BinarySearch(svc.order, id); found {
		svc.order = slices.Delete(svc.order, i, i+1)
	}
}
