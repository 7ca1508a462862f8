package node

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/switchboard-mesh/switchboard/dataplane"
	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
)

// maxComponentLen bounds each name component, so a name always fits a metric label
// and a log line.
const maxComponentLen = 128

// ErrBadName is matched by every error about a malformed name.
var ErrBadName = errors.New("bad name")

var componentLabels = [3]string{"org", "namespace", "service"}

// ParseName parses "org/namespace/service" or "org/namespace/service/id" (id a decimal
// uint64). Components are letters, digits, '.', '_' and '-'.
func ParseName(s string) (dataplane.Name, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 && len(parts) != 4 {
		return dataplane.Name{}, fmt.Errorf("%w %q: want org/namespace/service[/id], got %d parts", ErrBadName, s, len(parts))
	}
	n := dataplane.NewName(parts[0], parts[1], parts[2])
	if err := checkComponents(n); err != nil {
		return dataplane.Name{}, fmt.Errorf("%w %q: %w", ErrBadName, s, err)
	}
	if len(parts) == 4 {
		id, err := strconv.ParseUint(parts[3], 10, 64)
		if err != nil || id == dataplane.NoComponentID {
			return dataplane.Name{}, fmt.Errorf("%w %q: id %q is not a decimal number below %d", ErrBadName, s, parts[3], dataplane.NoComponentID)
		}
		n.ComponentID = id
	}
	return n, nil
}

func checkComponents(n dataplane.Name) error {
	for i, c := range n.Components {
		if c == "" {
			return fmt.Errorf("%s is empty", componentLabels[i])
		}
		if len(c) > maxComponentLen {
			return fmt.Errorf("%s is %d bytes, longer than %d", componentLabels[i], len(c), maxComponentLen)
		}
		for _, r := range c {
			if !isNameRune(r) {
				return fmt.Errorf("%s %q has %q: only letters, digits, '.', '_' and '-' are allowed", componentLabels[i], c, r)
			}
		}
	}
	return nil
}

func isNameRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
}

// nameFromProto converts and validates a wire name.
func nameFromProto(p *nodev1.Name) (dataplane.Name, error) {
	if p == nil {
		return dataplane.Name{}, fmt.Errorf("%w: name is missing", ErrBadName)
	}
	n := dataplane.NewName(p.GetOrg(), p.GetNamespace(), p.GetService())
	if err := checkComponents(n); err != nil {
		return dataplane.Name{}, fmt.Errorf("%w %q: %w", ErrBadName, n, err)
	}
	if p.Id != nil {
		if *p.Id == dataplane.NoComponentID {
			return dataplane.Name{}, fmt.Errorf("%w %q: id %d is reserved", ErrBadName, n, dataplane.NoComponentID)
		}
		n.ComponentID = *p.Id
	}
	return n, nil
}

// NameProto is the wire form of n.
func NameProto(n dataplane.Name) *nodev1.Name {
	p := &nodev1.Name{Org: n.Components[0], Namespace: n.Components[1], Service: n.Components[2]}
	if n.HasID() {
		id := n.ComponentID
		p.Id = &id
	}
	return p
}

// base is n without its instance id.
func base(n dataplane.Name) dataplane.Name {
	n.ComponentID = dataplane.NoComponentID
	return n
}
