package endpoint

import (
	"fmt"
	"strings"
)

// Health is an endpoint's routing state. The zero value is Healthy, so an entry
// written before the field existed, or by a writer that knows nothing of it, is
// healthy.
type Health uint8

const (
	// Healthy: routable.
	Healthy Health = iota
	// Unhealthy: registered but failing; readers that route leave it out.
	Unhealthy
	// Draining: about to go away; it finishes the work it has and takes no new work.
	Draining
)

// healthNames are the health states' names in every text form (JSON, flags, the
// manifest, annotations). Their order is the enum's.
var healthNames = [...]string{"healthy", "unhealthy", "draining"}

// String returns the state's name, or health(N) for a value out of range.
func (h Health) String() string {
	if int(h) < len(healthNames) {
		return healthNames[h]
	}
	return fmt.Sprintf("health(%d)", uint8(h))
}

// Valid reports whether h is one of the three states.
func (h Health) Valid() bool { return int(h) < len(healthNames) }

// Routable reports whether readers that route should send new work to the endpoint.
func (h Health) Routable() bool { return h == Healthy }

// Rank orders states from the most routable: 0 healthy, 1 draining (it finishes the
// work it has), 2 unhealthy and any state this release does not know. Readers that
// must pick one of several copies of an address, or give one state to several
// entries, keep the lowest or the highest.
func (h Health) Rank() int {
	switch h {
	case Healthy:
		return 0
	case Draining:
		return 1
	}
	return 2
}

// ParseHealth reads a state's name, case-insensitively; "" is Healthy.
func ParseHealth(s string) (Health, error) {
	if s == "" {
		return Healthy, nil
	}
	for i, n := range healthNames {
		if strings.EqualFold(s, n) {
			return Health(i), nil
		}
	}
	return 0, &FieldError{"health", s, "must be healthy, unhealthy or draining"}
}

// MarshalText writes the state's name.
func (h Health) MarshalText() ([]byte, error) {
	if !h.Valid() {
		return nil, &FieldError{"health", h.String(), "must be healthy, unhealthy or draining"}
	}
	return []byte(h.String()), nil
}

// UnmarshalText reads a state's name (see ParseHealth).
func (h *Health) UnmarshalText(b []byte) error {
	v, err := ParseHealth(string(b))
	if err != nil {
		return err
	}
	*h = v
	return nil
}
