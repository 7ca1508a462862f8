package cpharness

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/switchboard-mesh/switchboard/dataplane"
	"github.com/switchboard-mesh/switchboard/dataplane/memdp"
)

// wire is a node's datapath as its controller sees it: the memdp datapath, plus the
// far ends of the connections it makes and closes.
type wire struct {
	*memdp.Datapath
	n *Node
}

var (
	_ dataplane.Datapath = (*wire)(nil)
	_ dataplane.Relinker = (*wire)(nil)
)

// Connect dials another node's external endpoint: refused when nobody listens there,
// otherwise the listener accepts and claims the link.
func (w *wire) Connect(ctx context.Context, link, endpoint string, config json.RawMessage) (dataplane.ConnID, error) {
	dst := w.n.f.listener(endpoint)
	if dst == nil {
		return 0, fmt.Errorf("dial %s: connection refused", endpoint)
	}
	id, err := w.Datapath.Connect(ctx, link, endpoint, config)
	if err != nil {
		return 0, err
	}
	dst.accept(link, w.n.id, endpoint)
	return id, nil
}

// Disconnect closes both ends.
func (w *wire) Disconnect(ctx context.Context, conn dataplane.ConnID) error {
	var info dataplane.ConnInfo
	found := false
	for _, c := range w.Datapath.Connections() {
		if c.ID == conn {
			info, found = c, true
		}
	}
	err := w.Datapath.Disconnect(ctx, conn)
	if found && err == nil {
		w.n.farEnd(info).lose(info, w.n.id)
	}
	return err
}

// Subscribe honours DropBeforeSubscribe: the connection breaks just before. The
// connections are looked through only when a fault is armed: listing them for every
// subscription cost 6% of the benchmark's CPU at 10,000 nodes.
func (w *wire) Subscribe(ctx context.Context, conn dataplane.ConnID, name dataplane.Name, done func(error)) (dataplane.SubID, error) {
	if !w.n.dropsArmed() {
		return w.Datapath.Subscribe(ctx, conn, name, done)
	}
	for _, c := range w.Datapath.Connections() {
		if c.ID == conn && c.LinkID != "" && w.n.takeDropBeforeSub(c.LinkID) {
			w.n.DropLink(c.LinkID)
		}
	}
	return w.Datapath.Subscribe(ctx, conn, name, done)
}

// Relink hands an outgoing connection over to another link: the far end relabels its
// side and claims the new link, releasing its claim of the old one. A far end that never
// saw the connection (one made around the fabric) accepts it now.
func (w *wire) Relink(ctx context.Context, conn dataplane.ConnID, link string) error {
	var info dataplane.ConnInfo
	for _, c := range w.Datapath.Connections() {
		if c.ID == conn {
			info = c
		}
	}
	if err := w.Datapath.Relink(ctx, conn, link); err != nil {
		return err
	}
	if !info.Inbound {
		w.n.farEnd(info).relink(info, link, w.n.id)
	}
	return nil
}
