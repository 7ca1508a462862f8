package manifest

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/switchboard-mesh/switchboard/agent/check"
	"github.com/switchboard-mesh/switchboard/endpoint"
)

// Manifest is the list of entries a node registers.
type Manifest struct {
	Entries []Entry
}

// Entry is one endpoint with the checks that gate its registration.
type Entry struct {
	Endpoint endpoint.Endpoint
	// Checks all have to pass for the entry to be published; none means it always is.
	Checks []check.Spec
	// Line is where the entry starts in the manifest, for log messages.
	Line int
	// Held, when set, keeps the entry unpublished, and removes it at once if it was
	// published; it says why ("pod not Ready"). Manifest files never set it: sources
	// other than the manifest do (Agent.SetSource).
	Held string
	// KeepOnShutdown leaves the entry registered when the agent stops: its TTL bounds
	// how long it outlives the agent, and a restarted agent refreshes it. Pods use it,
	// so that restarting the agent does not take every pod of the node out.
	KeepOnShutdown bool
}

// ErrInvalid is matched (errors.Is) by every error about the manifest's content.
var ErrInvalid = errors.New("invalid manifest")

// Error locates a problem in the manifest.
type Error struct {
	Line   int    // 1-based; 0 when the problem has no single place
	Column int    // 1-based; 0 when only the line is known
	Path   string // e.g. "entries[2].checks[0].interval"
	Err    error
}

func (e *Error) Error() string {
	msg := e.Err.Error()
	if e.Path != "" {
		msg = e.Path + ": " + msg
	}
	switch {
	case e.Line > 0 && e.Column > 0:
		msg = fmt.Sprintf("line %d, column %d: %s", e.Line, e.Column, msg)
	case e.Line > 0:
		msg = fmt.Sprintf("line %d: %s", e.Line, msg)
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// MaxSize bounds the manifest files Load reads: a manifest lists one node's entries.
const MaxSize = 4 << 20

// Load reads and parses a manifest file, expanding ${NAME} from the environment (see
// ParseEnv); errors start with the file name.
func Load(path string) (*Manifest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", path, err)
	}
	if len(data) > MaxSize {
		return nil, fmt.Errorf("manifest %s: %w", path, &Error{Err: fmt.Errorf("larger than %d bytes", MaxSize)})
	}
	m, err := loadEnv(data)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", path, err)
	}
	return m, nil
}

// Endpoints returns the entries' endpoints.
func (m *Manifest) Endpoints() []endpoint.Endpoint {
	out := make([]endpoint.Endpoint, len(m.Entries))
	for i, e := range m.Entries {
		out[i] = e.Endpoint
	}
	return out
}
