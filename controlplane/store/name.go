package store

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
)

// ErrInvalidName is matched by every error of ParseName and Name.Validate.
var ErrInvalidName = errors.New("invalid name")

// NullComponent is the data plane's "no component id" sentinel.
const NullComponent = math.MaxUint64

const maxComponentLen = 255

// Name is what a route subscribes to: three components and an optional component id.
// It is comparable, so it can key maps.
type Name struct {
	Components [3]string
	ID         uint64
	HasID      bool
}

// NewName returns a name without a component id.
func NewName(c0, c1, c2 string) Name { return Name{Components: [3]string{c0, c1, c2}} }

// WithID returns the name with component id id; NullComponent means none.
func (n Name) WithID(id uint64) Name {
	n.ID, n.HasID = id, id != NullComponent
	if !n.HasID {
		n.ID = 0
	}
	return n
}

// String returns "c0/c1/c2" or "c0/c1/c2/id".
func (n Name) String() string {
	s := n.Components[0] + "/" + n.Components[1] + "/" + n.Components[2]
	if n.HasID {
		s += "/" + strconv.FormatUint(n.ID, 10)
	}
	return s
}

// Validate checks that each component is 1..255 printable characters without "/" or
// spaces.
func (n Name) Validate() error {
	for i, c := range n.Components {
		if err := validComponent(c); err != nil {
			return fmt.Errorf("%w: component %d %q: %s", ErrInvalidName, i, c, err)
		}
	}
	if n.HasID && n.ID == NullComponent {
		return fmt.Errorf("%w: component id %d is the null sentinel", ErrInvalidName, n.ID)
	}
	return nil
}

func validComponent(c string) error {
	switch {
	case c == "":
		return errors.New("must not be empty")
	case len(c) > maxComponentLen:
		return fmt.Errorf("longer than %d bytes", maxComponentLen)
	case strings.ContainsFunc(c, func(r rune) bool {
		return r == '/' || r == unicode.ReplacementChar || !unicode.IsPrint(r) || unicode.IsSpace(r)
	}):
		return errors.New("must be printable, without spaces or '/'")
	}
	return nil
}

// ParseName parses "c0/c1/c2" or "c0/c1/c2/id".
func ParseName(s string) (Name, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 && len(parts) != 4 {
		return Name{}, fmt.Errorf("%w: %q: want c0/c1/c2 or c0/c1/c2/id", ErrInvalidName, s)
	}
	n := NewName(parts[0], parts[1], parts[2])
	if len(parts) == 4 {
		id, err := strconv.ParseUint(parts[3], 10, 64)
		if err != nil {
			return Name{}, fmt.Errorf("%w: %q: component id %q is not an unsigned integer", ErrInvalidName, s, parts[3])
		}
		n = n.WithID(id)
	}
	if err := n.Validate(); err != nil {
		return Name{}, err
	}
	return n, nil
}
