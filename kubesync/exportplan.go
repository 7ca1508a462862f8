package kubesync

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// maxSliceEndpoints is the most endpoints export puts in one slice: the
// EndpointSlice controller's default, which kube-proxy and CoreDNS are tuned for.
const maxSliceEndpoints = 100

// exportPlan is what one registry service should look like in Kubernetes. It is
// computed from the registry alone, so a sync compares it with what exists.
type exportPlan struct {
	service *corev1.Service // nil: nothing exportable, remove what we made
	slices  []*discoveryv1.EndpointSlice
	notes   []note
}

// portKey is one distinct (protocol, port) of a registry service.
type portKey struct {
	proto string
	port  int
}

// planExport builds the Service and slices for registry service name from its
// selected endpoints. Entries whose address no slice may hold are left out first,
// so a port only they serve is not in the Service, and a service left with nothing
// has no Service at all.
func planExport(ns, name string, eps []endpoint.Endpoint) exportPlan {
	eps, notes := exportableAddresses(eps)
	ports, names, pn := planPorts(eps)
	notes = append(notes, pn...)
	if len(ports) == 0 {
		return exportPlan{notes: notes}
	}
	return exportPlan{
		service: desiredService(ns, name, ports),
		slices:  desiredSlices(ns, name, ports, groupAddresses(eps, names), addressStates(eps)),
		notes:   notes,
	}
}

// exportableAddresses returns the entries whose address an EndpointSlice may hold,
// each in the form it is written in, and a note for each address left out (one per
// address, whatever its ports and clusters).
func exportableAddresses(eps []endpoint.Endpoint) ([]endpoint.Endpoint, []note) {
	out := eps[:0:0]
	var notes []note
	noted := map[string]bool{}
	for _, e := range eps {
		a, why := sliceAddress(e.Address)
		if why != "" {
			if !noted[e.Address] {
				noted[e.Address] = true
				notes = append(notes, note{reason: reasonInvalidAddress, detail: e.Address + ": " + why})
			}
			continue
		}
		e.Address = a.String()
		out = append(out, e)
	}
	return out, notes
}

// sliceAddress is the address an EndpointSlice holds for a registry address, or
// why the API server would refuse it. Its rules are those of k8s.io/kubernetes
// v1.37 (pkg/apis/discovery/validation, validateEndpoints): a canonical IP of the
// slice's family (strict IP validation refuses IPv4-mapped IPv6 in either family)
// that ValidateEndpointIP accepts: not unspecified, loopback, link-local unicast or
// link-local multicast. TestKubeEndpointAddressRules checks them against a real
// API server.
//
// An IPv4-mapped IPv6 address (::ffff:10.0.0.3) is the IPv4 address it maps: it
// reaches the same host, and the API server takes it for IPv4 anyway, so it is
// exported as that, in an IPv4 slice, and checked as that.
func sliceAddress(s string) (netip.Addr, string) {
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		return a, "not an IP address"
	case a.Zone() != "":
		return a, "has an IPv6 zone"
	}
	a = a.Unmap()
	switch {
	case a.IsUnspecified():
		return a, "unspecified"
	case a.IsLoopback():
		return a, "loopback (127.0.0.0/8, ::1)"
	case a.IsLinkLocalUnicast():
		return a, "link-local (169.254.0.0/16, fe80::/10)"
	case a.IsLinkLocalMulticast():
		return a, "link-local multicast (224.0.0.0/24, ffx2::/16)"
	}
	return a, ""
}

// planPorts gives each distinct (protocol, port) a Service port, in protocol then
// port order. A Service holds one port per (L4 protocol, number) and one per name,
// so a second protocol on a port number (http and grpc both on 8080) is left out,
// as is an entry without a port, which a Service cannot express.
func planPorts(eps []endpoint.Endpoint) ([]corev1.ServicePort, map[portKey]string, []note) {
	keys, notes := portKeys(eps)
	perProto := map[string]int{}
	for _, k := range keys {
		perProto[k.proto]++
	}
	var ports []corev1.ServicePort
	names := map[portKey]string{}
	usedName, usedNum := map[string]bool{}, map[string]bool{}
	for _, k := range keys {
		sp := servicePort(k, perProto[k.proto] > 1)
		num := fmt.Sprintf("%s/%d", sp.Protocol, sp.Port)
		if usedName[sp.Name] || usedNum[num] {
			notes = append(notes, note{reason: reasonPortClash, detail: fmt.Sprintf("%s/%d", k.proto, k.port)})
			continue
		}
		usedName[sp.Name], usedNum[num] = true, true
		ports = append(ports, sp)
		names[k] = sp.Name
	}
	return ports, names, notes
}

// portKeys returns the distinct (protocol, port) pairs with a port, sorted, and a
// note for each protocol seen without one.
func portKeys(eps []endpoint.Endpoint) ([]portKey, []note) {
	var notes []note
	var keys []portKey
	seen := map[portKey]bool{}
	for _, e := range eps {
		k := portKey{e.Protocol, e.Port}
		if seen[k] {
			continue
		}
		seen[k] = true
		if e.Port == 0 {
			notes = append(notes, note{reason: reasonNoPort, detail: e.Protocol})
			continue
		}
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b portKey) int { return cmp.Or(cmp.Compare(a.proto, b.proto), cmp.Compare(a.port, b.port)) })
	return keys, notes
}

func servicePort(k portKey, several bool) corev1.ServicePort {
	return corev1.ServicePort{
		Name:        exportPortName(k.proto, k.port, several),
		Protocol:    l4Protocol(k.proto),
		Port:        int32(k.port),
		TargetPort:  intstr.FromInt32(int32(k.port)),
		AppProtocol: exportAppProtocol(k.proto),
	}
}

// desiredService is the selector-less Service: kube-proxy takes its endpoints
// from our slices, CoreDNS gives it a name. PreferDualStack gives it a cluster IP
// of each family the cluster has, as its slices may be of either.
func desiredService(ns, name string, ports []corev1.ServicePort) *corev1.Service {
	policy := corev1.IPFamilyPolicyPreferDualStack
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{LabelManagedBy: ManagedBy}},
		Spec: corev1.ServiceSpec{
			Type:           corev1.ServiceTypeClusterIP,
			Ports:          ports,
			IPFamilyPolicy: &policy,
		},
	}
}

// addrGroup is the addresses of one family that serve the same set of ports: the
// endpoints of a slice share its ports, so each such set needs slices of its own.
type addrGroup struct {
	family discoveryv1.AddressType
	ports  []string // port names, sorted
	addrs  []netip.Addr
}

// groupAddresses groups the addresses by family and the set of ports each serves.
// An address in several clusters' entries is one endpoint.
func groupAddresses(eps []endpoint.Endpoint, names map[portKey]string) []*addrGroup {
	served := map[netip.Addr]map[string]bool{}
	for _, e := range eps {
		name, ok := names[portKey{e.Protocol, e.Port}]
		a, why := sliceAddress(e.Address)
		if !ok || why != "" {
			continue // a port left out; exportableAddresses took out the addresses
		}
		if served[a] == nil {
			served[a] = map[string]bool{}
		}
		served[a][name] = true
	}
	groups := map[string]*addrGroup{}
	for a, set := range served {
		g := groupFor(groups, a, set)
		g.addrs = append(g.addrs, a)
	}
	out := make([]*addrGroup, 0, len(groups))
	for _, g := range groups {
		slices.SortFunc(g.addrs, netip.Addr.Compare)
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b *addrGroup) int {
		return cmp.Or(cmp.Compare(a.family, b.family), slices.Compare(a.ports, b.ports))
	})
	return out
}

func groupFor(groups map[string]*addrGroup, a netip.Addr, set map[string]bool) *addrGroup {
	fam := discoveryv1.AddressTypeIPv6
	if a.Is4() {
		fam = discoveryv1.AddressTypeIPv4
	}
	ports := make([]string, 0, len(set))
	for n := range set {
		ports = append(ports, n)
	}
	slices.Sort(ports)
	key := string(fam) + "|" + strings.Join(ports, ",")
	g := groups[key]
	if g == nil {
		g = &addrGroup{family: fam, ports: ports}
		groups[key] = g
	}
	return g
}

// desiredSlices cuts each group into slices of at most maxSliceEndpoints.
func desiredSlices(ns, svc string, ports []corev1.ServicePort, groups []*addrGroup, states map[netip.Addr]addrState) []*discoveryv1.EndpointSlice {
	byName := map[string]corev1.ServicePort{}
	for _, p := range ports {
		byName[p.Name] = p
	}
	var out []*discoveryv1.EndpointSlice
	for _, g := range groups {
		sp := make([]discoveryv1.EndpointPort, 0, len(g.ports))
		for _, n := range g.ports {
			sp = append(sp, slicePort(byName[n]))
		}
		for i, chunk := range chunks(g.addrs, maxSliceEndpoints) {
			out = append(out, &discoveryv1.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Name: sliceName(svc, g, i), Namespace: ns, Labels: sliceLabels(svc)},
				AddressType: g.family,
				Endpoints:   sliceEndpoints(chunk, states),
				Ports:       sp,
			})
		}
	}
	return out
}

func sliceLabels(svc string) map[string]string {
	return map[string]string{
		discoveryv1.LabelServiceName: svc,
		discoveryv1.LabelManagedBy:   SliceManagedBy,
		LabelManagedBy:               ManagedBy,
	}
}

func slicePort(p corev1.ServicePort) discoveryv1.EndpointPort {
	name, proto, port := p.Name, p.Protocol, p.Port
	return discoveryv1.EndpointPort{Name: &name, Protocol: &proto, Port: &port, AppProtocol: p.AppProtocol}
}

func sliceEndpoints(addrs []netip.Addr, states map[netip.Addr]addrState) []discoveryv1.Endpoint {
	out := make([]discoveryv1.Endpoint, len(addrs))
	for i, a := range addrs {
		st := states[a]
		out[i] = discoveryv1.Endpoint{Addresses: []string{a.String()}, Conditions: conditions(st.health)}
		if st.zone != "" {
			out[i].Zone = &st.zone
		}
	}
	return out
}

// addrState is what a slice endpoint says of one address besides the address: a
// slice endpoint stands for all its ports, so entries of one address that disagree
// give it the least routable health among them and the first zone.
type addrState struct {
	zone   string
	health endpoint.Health
}

func addressStates(eps []endpoint.Endpoint) map[netip.Addr]addrState {
	out := make(map[netip.Addr]addrState, len(eps))
	for _, e := range eps {
		a, why := sliceAddress(e.Address)
		if why != "" {
			continue
		}
		st := out[a]
		if st.zone == "" {
			st.zone = e.Zone
		}
		if e.Health.Rank() > st.health.Rank() {
			st.health = e.Health
		}
		out[a] = st
	}
	return out
}

// conditions are a slice endpoint's conditions for a health, as kube-proxy reads
// them: it routes to ready endpoints, and falls back to serving, terminating ones
// only when none is ready.
func conditions(h endpoint.Health) discoveryv1.EndpointConditions {
	ready, serving, terminating := h == endpoint.Healthy, h != endpoint.Unhealthy, h == endpoint.Draining
	return discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating}
}

// sliceName is deterministic, so a sync finds the slice it made before by name and
// updates it in place: SERVICE-v4|v6-HASH-N, HASH naming the set of ports, N the
// chunk.
func sliceName(svc string, g *addrGroup, i int) string {
	h := fnv.New32a()
	h.Write([]byte(strings.Join(g.ports, ",")))
	fam := "v6"
	if g.family == discoveryv1.AddressTypeIPv4 {
		fam = "v4"
	}
	return fmt.Sprintf("%s-%s-%08x-%d", svc, fam, h.Sum32(), i)
}

func chunks[T any](s []T, n int) [][]T {
	var out [][]T
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	return append(out, s)
}
