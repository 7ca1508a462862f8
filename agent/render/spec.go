package render

import (
	"errors"
	"fmt"
	"strings"
)

// Spec is one template to keep rendered: the agent's --render TEMPLATE:OUT[:COMMAND].
type Spec struct {
	Template string
	Out      string
	// Command, when set, runs through sh -c after each change of Out.
	Command string
}

// ParseSpec parses TEMPLATE:OUT[:COMMAND]. The first two colons separate the parts, so
// the command may contain colons but the file names may not.
func ParseSpec(s string) (Spec, error) {
	parts := strings.SplitN(s, ":", 3)
	if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
		return Spec{}, fmt.Errorf("render %q: want TEMPLATE:OUT[:COMMAND]", s)
	}
	sp := Spec{Template: parts[0], Out: parts[1]}
	if len(parts) == 3 {
		sp.Command = strings.TrimSpace(parts[2])
		if sp.Command == "" {
			return Spec{}, fmt.Errorf("render %q: the command after the second ':' is empty", s)
		}
	}
	if sp.Template == sp.Out {
		return Spec{}, errors.New("render " + s + ": the output would overwrite the template")
	}
	return sp, nil
}

func (s Spec) String() string {
	if s.Command == "" {
		return s.Template + ":" + s.Out
	}
	return s.Template + ":" + s.Out + ":" + s.Command
}
