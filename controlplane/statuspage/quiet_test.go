package statuspage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/controlplane/server"
	"github.com/switchboard-mesh/switchboard/controlplane/statuspage"
	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
	"github.com/switchboard-mesh/switchboard/internal/syncbuf"
)

// quietNode is a data-plane node that registers over the real southbound API and
// then answers none of the control plane's requests until told to.
type quietNode struct {
	stream grpc.BidiStreamingClient[controllerv1.ControlMessage, controllerv1.ControlMessage]
	answer atomic.Bool
	asked  atomic.Int32 // requests received
}

func startQuietNode(t *testing.T, addr, group, id string) *quietNode {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := controllerv1.NewControllerServiceClient(conn).OpenControlChannel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := &quietNode{stream: stream}
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		<-done
		conn.Close()
	})
	if _, err := stream.Recv(); err != nil { // the control plane's greeting
		close(done)
		t.Fatal(err)
	}
	err = stream.Send(&controllerv1.ControlMessage{MessageId: "reg", Payload: &controllerv1.ControlMessage_RegisterNodeRequest{
		RegisterNodeRequest: &controllerv1.RegisterNodeRequest{NodeId: id, GroupName: group},
	}})
	if resp, rerr := stream.Recv(); err != nil || rerr != nil || !resp.GetRegisterNodeResponse().GetSuccess() {
		close(done)
		t.Fatalf("register: %v, %v, %v", err, rerr, resp)
	}
	go func() {
		defer close(done)
		n.serve()
	}()
	return n
}

// serve reads requests until the stream ends, and answers them once answer is set.
func (n *quietNode) serve() {
	for {
		msg, err := n.stream.Recv()
		if err != nil {
			return
		}
		n.asked.Add(1)
		if !n.answer.Load() {
			continue
		}
		reply := &controllerv1.ControlMessage{MessageId: "r-" + msg.GetMessageId(), ReplyTo: msg.GetMessageId()}
		switch {
		case msg.GetConnectionListRequest() != nil:
			reply.Payload = &controllerv1.ControlMessage_ConnectionListResponse{ConnectionListResponse: &controllerv1.ConnectionListResponse{}}
		case msg.GetSubscriptionListRequest() != nil:
			reply.Payload = &controllerv1.ControlMessage_SubscriptionListResponse{SubscriptionListResponse: &controllerv1.SubscriptionListResponse{}}
		case msg.GetConfigCommand() != nil:
			reply.Payload = &controllerv1.ControlMessage_ConfigCommandAck{ConfigCommandAck: &controllerv1.ConfigCommandAck{}}
		default:
			continue
		}
		if n.stream.Send(reply) != nil {
			return
		}
	}
}

// TestNodeThatDoesNotAnswer: a node that registers and then answers nothing is
// logged at warn level once, at its first request timeout — not once per timeout,
// nor only after the reconcilers' retries run out — and its row on the page says
// since when it does not answer. When it answers again that is logged at info, once,
// and the page drops the mark.
func TestNodeThatDoesNotAnswer(t *testing.T) {
	var logs syncbuf.Buffer
	srv := controlPlane(t, "topology:\n  links:\n    - group: cloud\n      neighbors: ['*']\n", server.Options{
		StatusRefresh:  time.Second,
		RequestTimeout: 100 * time.Millisecond,
		Logger:         slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	base := "http://" + srv.MetricsAddr()
	node := startQuietNode(t, srv.SouthboundAddr(), "edge", "quiet")

	// Several timeouts: the reconcilers ask, time out and retry.
	s := waitState(t, base, func(s statuspage.Snapshot) bool { return timeouts(s, "edge/quiet") >= 4 })
	if n := node.asked.Load(); n < 4 {
		t.Fatalf("the node was asked %d times, want at least 4", n)
	}
	warns := logLines(&logs, "level=WARN", "node=edge/quiet")
	if len(warns) != 1 || !strings.Contains(warns[0], "does not answer") {
		t.Fatalf("after %d timeouts, warnings naming the node: %d, want exactly one saying it does not answer:\n%s",
			timeouts(s, "edge/quiet"), len(warns), strings.Join(warns, "\n"))
	}
	row := nodeRow(t, base, "edge/quiet")
	if !strings.Contains(row, "not answering since") || !strings.Contains(row, `class="bad"`) {
		t.Fatalf("the node's row does not say it is not answering:\n%s", row)
	}
	if since := notAnsweringSince(t, base, "edge/quiet"); since == nil || time.Since(*since) > time.Minute {
		t.Fatalf("state.json says the node is not answering since %v", since)
	}

	node.answer.Store(true)
	deadline := time.Now().Add(10 * time.Second)
	for notAnsweringSince(t, base, "edge/quiet") != nil {
		if time.Now().After(deadline) {
			t.Fatal("the node answers and state.json still says it does not")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if row := nodeRow(t, base, "edge/quiet"); strings.Contains(row, "not answering") {
		t.Fatalf("the node answers and its row still says it does not:\n%s", row)
	}
	for len(logLines(&logs, "level=INFO", "node=edge/quiet", "answers")) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no info line that the node answers again:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := len(logLines(&logs, "level=INFO", "node=edge/quiet", "answers")); n != 1 {
		t.Fatalf("%d info lines that the node answers again, want 1", n)
	}
	if n := len(logLines(&logs, "level=WARN", "node=edge/quiet")); n != 1 {
		t.Fatalf("%d warnings naming the node, want still 1", n)
	}
}

// timeouts counts the recorded reconcile errors of node that are request timeouts.
func timeouts(s statuspage.Snapshot, node string) int {
	n := 0
	for _, e := range s.Errors {
		if e.Node == node && strings.Contains(e.Error, "timed out") {
			n++
		}
	}
	return n
}

// notAnsweringSince is what state.json says of the node (decoded on its own, so
// this test reads whatever the page serves).
func notAnsweringSince(t *testing.T, base, id string) *time.Time {
	t.Helper()
	var s struct {
		Groups []struct {
			Nodes []struct {
				ID                string     `json:"id"`
				NotAnsweringSince *time.Time `json:"notAnsweringSince"`
			} `json:"nodes"`
		} `json:"groups"`
	}
	_, body := fetch(t, base+"/status/state.json")
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	for _, g := range s.Groups {
		for _, n := range g.Nodes {
			if n.ID == id {
				return n.NotAnsweringSince
			}
		}
	}
	t.Fatalf("state.json has no node %s:\n%s", id, body)
	return nil
}

// nodeRow is the node's row of the groups table on the page.
func nodeRow(t *testing.T, base, id string) string {
	t.Helper()
	_, html := fetch(t, base+"/status")
	start := strings.Index(html, fmt.Sprintf(`<tr data-node=%q`, id))
	if start < 0 {
		t.Fatalf("the page has no row for %s:\n%s", id, html)
	}
	end := strings.Index(html[start:], "</tr>")
	return html[start : start+end]
}

// logLines returns the lines of logs that contain every one of parts.
func logLines(logs *syncbuf.Buffer, parts ...string) []string {
	var out []string
next:
	for _, line := range strings.Split(logs.String(), "\n") {
		for _, p := range parts {
			if !strings.Contains(line, p) {
				continue next
			}
		}
		out = append(out, line)
	}
	return out
}
