// Package ccmref is Choria CCM's own lookup of registration entries, rewritten
// here as the anchor the JetStream backend's lookups are measured against (in
// bench/jetstream and the backend's Go benchmarks): one batched last-per-subject
// direct get (multi_last) of the subjects matching a filter, each entry decoded
// with encoding/json into CCM's shape, markers dropped, sorted by address then
// port.
package ccmref

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go"
)

// Entry is the shape CCM decodes a registration into.
type Entry struct {
	Cluster     string            `json:"cluster"`
	Service     string            `json:"service"`
	Protocol    string            `json:"protocol"`
	Address     string            `json:"address"`
	Port        any               `json:"port"`
	Priority    int64             `json:"priority"`
	Annotations map[string]string `json:"annotations,omitempty"`
	TTL         time.Duration     `json:"ttl,omitempty"`
}

// Lookup reads the live entries of stream whose subjects match filter, at most
// batch of them. Each wait for a message is bounded by 5 s.
func Lookup(ctx context.Context, nc *nats.Conn, stream, filter string, batch int) ([]*Entry, error) {
	req, err := json.Marshal(map[string]any{"multi_last": []string{filter}, "batch": batch})
	if err != nil {
		return nil, err
	}
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest("$JS.API.DIRECT.GET."+stream, inbox, req); err != nil {
		return nil, err
	}
	var out []*Entry
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := sub.NextMsgWithContext(rctx)
		cancel()
		if err != nil {
			return nil, err
		}
		switch m.Header.Get("Status") {
		case "":
		case "204": // end of the batch
			sortEntries(out)
			return out, nil
		default:
			return nil, fmt.Errorf("multi_last: %s %s", m.Header.Get("Status"), m.Header.Get("Description"))
		}
		if m.Header.Get("Nats-Marker-Reason") != "" {
			continue
		}
		e := &Entry{}
		if err := json.Unmarshal(m.Data, e); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
}

func sortEntries(out []*Entry) {
	sort.Slice(out, func(i, j int) bool {
		if out[i].Address != out[j].Address {
			return out[i].Address < out[j].Address
		}
		pi, _ := out[i].Port.(float64)
		pj, _ := out[j].Port.(float64)
		return pi < pj
	})
}
