package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/switchboard-mesh/switchboard/internal/controllerproto"
)

// ConnID is the datapath's own id of a connection.
type ConnID uint64

// SubID is the datapath's own id of a subscription.
type SubID uint64

// NoComponentID marks a Name without a component id (the spec's NULL_COMPONENT).
const NoComponentID uint64 = math.MaxUint64

// Name is what a subscription routes: three components and an optional component id.
// It is comparable, so it keys maps.
type Name struct {
	Components  [3]string
	ComponentID uint64
}

// NewName returns a Name without a component id.
func NewName(c0, c1, c2 string) Name {
	return Name{Components: [3]string{c0, c1, c2}, ComponentID: NoComponentID}
}

// WithID returns n with component id id.
func (n Name) WithID(id uint64) Name { n.ComponentID = id; return n }

// HasID reports whether n carries a component id.
func (n Name) HasID() bool { return n.ComponentID != NoComponentID }

func (n Name) String() string {
	s := n.Components[0] + "/" + n.Components[1] + "/" + n.Components[2]
	if n.HasID() {
		s += fmt.Sprintf("/%d", n.ComponentID)
	}
	return s
}

// Validate rejects names with an empty component.
func (n Name) Validate() error {
	for i, c := range n.Components {
		if c == "" {
			return fmt.Errorf("name %q: component %d is empty", n, i)
		}
	}
	return nil
}

// ConnInfo describes one live datapath connection.
type ConnInfo struct {
	ID ConnID
	// LinkID is the CP link the connection serves; empty for connections the CP did
	// not ask for. Inbound connections carry it from the dialer's metadata.
	LinkID   string
	Endpoint string
	// Inbound is true for connections the node accepted rather than dialed.
	Inbound bool
}

// SubInfo describes one subscription installed in the datapath.
type SubInfo struct {
	ID   SubID
	Conn ConnID
	Name Name
}

// Errors a Datapath returns; the controller maps them to the exact status strings
// the CP treats specially.
var (
	ErrConnNotFound = errors.New(StatusConnectionNotFound)
	ErrSubNotFound  = errors.New(StatusSubscriptionNotFound)
)

// Status strings in ConfigCommandAck that the CP's reconcilers match exactly; the
// controller protocol fixes them (internal/controllerproto).
const (
	StatusConnectionNotFound   = controllerproto.ConnectionNotFound
	StatusSubscriptionNotFound = controllerproto.SubscriptionNotFound
)

// Datapath is the node's forwarding plane as the controller drives it. All methods
// are safe for concurrent use.
type Datapath interface {
	// Connect dials endpoint for link linkID with config (a JSON object).
	Connect(ctx context.Context, linkID, endpoint string, config json.RawMessage) (ConnID, error)
	// Disconnect closes conn; ErrConnNotFound when it is not live.
	Disconnect(ctx context.Context, conn ConnID) error
	// Subscribe sends a subscription for name over conn and returns its id. The
	// datapath's acknowledgement arrives through done, called at most once, possibly
	// before Subscribe returns, possibly never (the controller times it out). A
	// synchronous error (ErrConnNotFound, ...) means done is never called.
	Subscribe(ctx context.Context, conn ConnID, name Name, done func(error)) (SubID, error)
	// Unsubscribe removes sub from conn; ErrSubNotFound or ErrConnNotFound when absent.
	Unsubscribe(ctx context.Context, conn ConnID, sub SubID) error
	// Connections lists live connections.
	Connections() []ConnInfo
	// Subscriptions lists installed subscriptions.
	Subscriptions() []SubInfo
}

// Relinker is a Datapath that can hand a live outgoing connection over to another
// link: the connection is labelled with the new link id and the far end learns it over
// the connection itself (and claims the link), so the connection is neither closed nor
// dialled again and its subscriptions stay. The controller uses it when a command
// deletes a connection only to dial its endpoint again for another link — after a
// control-plane restart, every link comes back under a new id. A Datapath without it
// has the old connection closed and a new one dialled.
type Relinker interface {
	// Relink labels conn with link; ErrConnNotFound when conn is not live.
	Relink(ctx context.Context, conn ConnID, link string) error
}
