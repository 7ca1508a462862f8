package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/dataplane/node"
	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
)

func init() { subcommands = append(subcommands, newSubCmd) }

// subLine is one received message as `sub -o json` prints it.
type subLine struct {
	Name      string    `json:"name"`
	Payload   string    `json:"payload"`
	Origin    string    `json:"origin"`
	Seq       uint64    `json:"seq"`
	HopsLeft  uint32    `json:"hops_left"`
	Broadcast bool      `json:"broadcast,omitempty"`
	Published time.Time `json:"published"`
	// ReplyTo is set on a request: the token its answer carries.
	ReplyTo string `json:"reply_to,omitempty"`
}

func newSubCmd(a *app) *cobra.Command {
	var (
		f      nodeClientFlags
		output string
		count  int
		answer string
	)
	cmd := &cobra.Command{
		Use:   "sub --node ADDR NAME",
		Short: "Subscribe to a name through a node and print messages as they arrive",
		Long: `Subscribe to NAME (org/namespace/service, or org/namespace/service/instance) at the
node at --node and print each message as it arrives, until interrupted (or after
--count messages). It exits 0 then; when the node ends the subscription (it shuts
down, or the connection breaks) it exits 1 with a line that says so. With an instance id, the subscriber is that instance: it gets the
messages sent to it and its share of those sent to the service. With --reply, every
request it receives ('switchboard req') is answered with the given message.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "text" && output != "json" {
				return usagef("-o %q: want text or json", output)
			}
			name, cc, err := f.open(args[0])
			if err != nil {
				return err
			}
			defer func() { _ = cc.Close() }()
			client := nodev1.NewNodeServiceClient(cc)
			st, err := client.Subscribe(cmd.Context(), &nodev1.SubscribeRequest{Name: node.NameProto(name)})
			if err != nil {
				return fmt.Errorf("subscribe %s: %w", name, err)
			}
			enc := json.NewEncoder(a.out)
			seen := 0
			for {
				resp, err := st.Recv()
				switch {
				case status.Code(err) == codes.Canceled && cmd.Context().Err() != nil:
					return nil
				case errors.Is(err, io.EOF):
					// Only --count or an interrupt ends a subscription well: a script
					// must be able to tell that the node went away.
					return fmt.Errorf("node %s ended the subscription to %s after %d messages", f.addr, name, seen)
				case err != nil:
					return fmt.Errorf("node %s ended the subscription to %s after %d messages: %w", f.addr, name, seen, err)
				}
				for _, m := range resp.GetMessages() {
					if err := printMessage(a, enc, output, m); err != nil {
						return err
					}
					if answer != "" && m.GetReplyTo() != "" {
						// A request that cannot be answered (its requester gave up) is no
						// reason to stop subscribing.
						if _, err := client.Respond(cmd.Context(), &nodev1.RespondRequest{ReplyTo: m.GetReplyTo(), Payload: []byte(answer)}); err != nil {
							fmt.Fprintf(a.errOut, "answering a request to %s: %v\n", name, err)
						}
					}
					if seen++; count > 0 && seen >= count {
						return nil
					}
				}
			}
		},
	}
	f.register(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json (one object per line)")
	cmd.Flags().StringVar(&answer, "reply", "", "answer every request received with this message")
	cmd.Flags().IntVar(&count, "count", 0, "exit after this many messages (0: run until interrupted)")
	return cmd
}

func printMessage(a *app, enc *json.Encoder, output string, m *nodev1.Message) error {
	name := m.GetName()
	n := name.GetOrg() + "/" + name.GetNamespace() + "/" + name.GetService()
	if name.Id != nil {
		n += fmt.Sprintf("/%d", name.GetId())
	}
	if output == "json" {
		return enc.Encode(subLine{Name: n, Payload: string(m.GetPayload()), Origin: m.GetOrigin(), Seq: m.GetSeq(),
			HopsLeft: m.GetTtl(), Broadcast: m.GetBroadcast(), Published: time.Unix(0, m.GetPublishedUnixNano()).UTC(), ReplyTo: m.GetReplyTo()})
	}
	_, err := fmt.Fprintf(a.out, "%s from %s: %s\n", n, m.GetOrigin(), m.GetPayload())
	return err
}
