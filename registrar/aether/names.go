package aether

import (
	"fmt"
	"strings"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// Service names. Aether's agents name a service "NS/NAME", its Kubernetes
// namespace and Service name, and drop watch events of names that are not so
// qualified. Our names cannot hold '/' (they are parts of etcd keys, JetStream
// subjects and DNS labels), so Aether's "NS/NAME" is our NAME__NS: both parts are
// Kubernetes names (NS a DNS-1123 label, NAME a DNS-1035 label), which never hold
// '_', so the first "__" splits ours back unambiguously. An Aether name without
// '/' is ours as it is, unless it has that very form (it would read back as
// "NS/NAME"), which is refused. Every name of ours reads back through Aether's
// API, as "NS/NAME" when it is NAME__NS with both parts such labels, else as it
// is; OurService(AetherService(s)) == s for every valid name s of ours.

// qualifier joins NAME and NS in our names.
const qualifier = "__"

// maxLabel is the length limit of a DNS label.
const maxLabel = 63

// OurService is our service name for Aether's name s. The error names no field:
// callers prefix theirs ("service_name", "filter.services[i]").
func OurService(s string) (string, error) {
	ns, name, qualified := strings.Cut(s, "/")
	if !qualified {
		if err := endpoint.ValidateName("service", s); err != nil {
			return "", fmt.Errorf("must be NAMESPACE/NAME or a name matching ^[a-zA-Z][a-zA-Z0-9_-]*$")
		}
		if n, ns, ok := splitOurs(s); ok {
			return "", fmt.Errorf("reads back as %s/%s (a name of the form NAME%sNAMESPACE is Aether's NAMESPACE/NAME): register it as that", ns, n, qualifier)
		}
		return s, nil
	}
	switch {
	case !dns1123Label(ns):
		return "", fmt.Errorf("namespace %q: must be a DNS-1123 label (lower-case letters, digits and '-', at most %d characters, beginning and ending with a letter or digit)", ns, maxLabel)
	case !dns1035Label(name):
		return "", fmt.Errorf("name %q: must be a DNS-1035 label (lower-case letters, digits and '-', at most %d characters, beginning with a letter, ending with a letter or digit)", name, maxLabel)
	}
	return name + qualifier + ns, nil
}

// AetherService is Aether's name of our service s.
func AetherService(s string) string {
	if name, ns, ok := splitOurs(s); ok {
		return ns + "/" + name
	}
	return s
}

// splitOurs splits our NAME__NS into its parts; ok is false for a name of
// another form.
func splitOurs(s string) (name, ns string, ok bool) {
	name, ns, found := strings.Cut(s, qualifier)
	if !found || !dns1035Label(name) || !dns1123Label(ns) {
		return "", "", false
	}
	return name, ns, true
}

// serviceError is OurService's error as the message of an InvalidArgument
// naming field.
func serviceError(field, value string, err error) string {
	if len(value) > 64 {
		value = value[:32] + "…"
	}
	return fmt.Sprintf("%s %q: %v", field, value, err)
}

// dns1123Label: [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63 characters.
func dns1123Label(s string) bool {
	if s == "" || len(s) > maxLabel || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// dns1035Label: [a-z]([-a-z0-9]*[a-z0-9])?, at most 63 characters.
func dns1035Label(s string) bool {
	return dns1123Label(s) && s[0] >= 'a' && s[0] <= 'z'
}
