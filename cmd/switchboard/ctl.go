package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-mesh/switchboard/controlplane/access"
	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
	controlplanev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controlplane/v1"
	"github.com/switchboard-mesh/switchboard/internal/loopback"
)

func init() { subcommands = append(subcommands, newCtlCmd) }

// ctlOptions are the flags every `ctl` command shares.
type ctlOptions struct {
	server    string
	output    string
	timeout   time.Duration
	tls       clientTLSFlags
	token     string
	tokenFile string
}

// tokenEnv names the environment variable ctl takes a bearer token from.
const tokenEnv = "SWITCHBOARD_TOKEN"

func newCtlCmd(a *app) *cobra.Command {
	o := &ctlOptions{}
	cmd := &cobra.Command{
		Use:   "ctl",
		Short: "Manage a control plane: groups, nodes, links, routes, segments",
		Long: `Talk to a control plane's northbound API. Topology changes (segment and link
add/remove) are refused when the control plane takes its topology from its config file.
Link and route lists show applied ones; --all shows every state.

Credentials: a client certificate (--tls-cert, --tls-key) whose identity the control
plane binds to a role, or a bearer token, taken from the first of
  --token TOKEN                  (visible to other users in the process list: avoid)
  the SWITCHBOARD_TOKEN environment variable
  --token-file PATH              (a file holding the token)
A token is sent only over TLS, or in plaintext to a loopback address. Viewers may
list; admins may also change segments, links and routes.`,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.validateLogFlags(); err != nil {
				return err
			}
			return o.checkOutput(cmd)
		},
	}
	cmd.PersistentFlags().StringVar(&o.server, "server", "127.0.0.1:50051", "control plane northbound address")
	cmd.PersistentFlags().StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml (topology: dot or mermaid)")
	cmd.PersistentFlags().DurationVar(&o.timeout, "timeout", 15*time.Second, "how long one request may take")
	o.tls.register(cmd.PersistentFlags(), "")
	cmd.PersistentFlags().StringVar(&o.token, "token", "", "bearer token (precedence: --token, then $"+tokenEnv+", then --token-file)")
	cmd.PersistentFlags().StringVar(&o.tokenFile, "token-file", "", "file holding the bearer token (used when neither --token nor $"+tokenEnv+" is set)")
	cmd.AddCommand(
		ctlGroupCmd(a, o), ctlNodeCmd(a, o), ctlLinkCmd(a, o), ctlSegmentCmd(a, o), ctlRouteCmd(a, o),
		ctlConnectionCmd(a, o), ctlSubscriptionCmd(a, o), ctlTopologyCmd(a, o), ctlTokenCmd(a),
	)
	o.addCompletions(cmd)
	return cmd
}

// call dials the control plane and runs fn with a bounded context.
func (o *ctlOptions) call(ctx context.Context, fn func(context.Context, controlplanev1.ControlPlaneServiceClient) error) error {
	creds, err := o.tls.credentials()
	if err != nil {
		return err
	}
	dialOpts := []grpc.DialOption{}
	token, err := o.bearerToken()
	if err != nil {
		return err
	}
	if token != "" {
		if creds == nil && !loopback.Addr(o.server) {
			return usagef("refusing to send a token in plaintext to %s: use TLS (--tls-ca) or a loopback address", o.server)
		}
		dialOpts = append(dialOpts, grpc.WithPerRPCCredentials(bearerCreds{token: token, tls: creds != nil}))
	}
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(o.server, append(dialOpts, grpc.WithTransportCredentials(creds))...)
	if err != nil {
		return usagef("--server %q: %v", o.server, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	return fn(ctx, controlplanev1.NewControlPlaneServiceClient(conn))
}

// bearerToken picks the token: --token, then $SWITCHBOARD_TOKEN, then --token-file;
// "" when none is given.
func (o *ctlOptions) bearerToken() (string, error) {
	if o.token != "" {
		return o.token, nil
	}
	if t := strings.TrimSpace(os.Getenv(tokenEnv)); t != "" {
		return t, nil
	}
	if o.tokenFile == "" {
		return "", nil
	}
	data, err := os.ReadFile(o.tokenFile)
	if err != nil {
		return "", usagef("--token-file: %v", err)
	}
	t := strings.TrimSpace(string(data))
	if t == "" || strings.ContainsAny(t, " \t\r\n") {
		return "", usagef("--token-file %s: want the token alone on one line", o.tokenFile)
	}
	return t, nil
}

// bearerCreds sends "authorization: Bearer TOKEN" with every call.
type bearerCreds struct {
	token string
	tls   bool
}

func (b bearerCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity is false only for plaintext to loopback, which call
// allows explicitly; gRPC then refuses to send the token anywhere else in plaintext.
func (b bearerCreds) RequireTransportSecurity() bool { return b.tls }

func ctlTokenCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Make bearer tokens and the token file lines the control plane reads"}
	var role, name string
	gen := &cobra.Command{
		Use:   "generate",
		Short: "Print a new random token and its line for the token file",
		Long: `Print a new random token (give it to its holder; it is stored nowhere) and the line
to add to the control plane's northbound.authorization.token_file, which holds only
its SHA-256 hash. Send the control plane SIGHUP after editing the file.`,
		Example: "  switchboard ctl token generate --role viewer --name dashboard",
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			token := access.Generate()
			line, err := access.HashLine(role, name, token)
			if err != nil {
				return usageError{err}
			}
			fmt.Fprintf(a.out, "token:      %s\ntoken file: %s\n", token, line)
			return nil
		},
	}
	hash := &cobra.Command{
		Use:   "hash",
		Short: "Read a token on stdin and print its line for the token file",
		Long: `Read a token from standard input (not from the command line, which other users can
see) and print the token file line for it: ROLE NAME sha256:HEX.`,
		Example: "  printenv SWITCHBOARD_TOKEN | switchboard ctl token hash --role admin --name ci",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 4096))
			if err != nil {
				return err
			}
			line, err := access.HashLine(role, name, strings.TrimSpace(string(data)))
			if err != nil {
				return usageError{err}
			}
			fmt.Fprintln(a.out, line)
			return nil
		},
	}
	for _, c := range []*cobra.Command{gen, hash} {
		c.Flags().StringVar(&role, "role", "", "role of the token: viewer or admin (required)")
		c.Flags().StringVar(&name, "name", "", "name of the token's holder, as the audit log shows it (required)")
		_ = c.MarkFlagRequired("role")
		_ = c.MarkFlagRequired("name")
	}
	cmd.AddCommand(gen, hash)
	return cmd
}

func ctlNodeCmd(a *app, o *ctlOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "node", Short: "Data-plane nodes"}
	cmd.AddCommand(&cobra.Command{
		Use: "list", Short: "List registered nodes", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.call(cmd.Context(), func(ctx context.Context, c controlplanev1.ControlPlaneServiceClient) error {
				resp, err := c.ListNodes(ctx, &controlplanev1.ListNodesRequest{})
				if err != nil {
					return err
				}
				return o.print(a.out, resp, []string{"ID", "GROUP", "CONNECTED", "ENDPOINTS"}, len(resp.GetNodes()), func(i int) []string {
					n := resp.GetNodes()[i]
					var eps []string
					for _, d := range n.GetConnectionDetails() {
						ep := d.GetEndpoint()
						if d.GetExternalEndpoint() != "" {
							ep += " (external " + d.GetExternalEndpoint() + ")"
						}
						eps = append(eps, ep)
					}
					return []string{n.GetId(), n.GetGroup(), fmt.Sprint(n.GetConnected()), strings.Join(eps, ", ")}
				})
			})
		},
	})
	return cmd
}

func ctlLinkCmd(a *app, o *ctlOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "link", Short: "Links between nodes, and topology links between groups"}
	var src, dst, segment string
	var states stateFlags
	list := &cobra.Command{
		Use: "list", Short: "List links (node to node connections); applied ones unless --all or --status", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.call(cmd.Context(), func(ctx context.Context, c controlplanev1.ControlPlaneServiceClient) error {
				resp, err := c.ListLinks(ctx, &controlplanev1.ListLinksRequest{SourceNodeId: src, DestNodeId: dst, Statuses: states.statuses()})
				if err != nil {
					return err
				}
				return o.print(a.out, resp, []string{"LINK", "SOURCE", "DEST GROUP", "DEST NODE", "ENDPOINT", "STATUS", "MESSAGE"}, len(resp.GetLinks()), func(i int) []string {
					l := resp.GetLinks()[i]
					return []string{l.GetLinkId(), l.GetSourceNodeId(), l.GetDestGroup(), dash(l.GetDestNodeId()), l.GetDestEndpoint(), l.GetStatus(), l.GetStatusMessage()}
				})
			})
		},
	}
	list.Flags().StringVar(&src, "source", "", "only links from this node")
	list.Flags().StringVar(&dst, "dest", "", "only links to this node")
	states.register(list, "pending, connecting, applied, failed, deleted")
	mutate := func(use, short string, add bool) *cobra.Command {
		c := &cobra.Command{
			Use: use + " GROUP_A GROUP_B", Short: short, Args: cobra.ExactArgs(2),
			Example: "  switchboard ctl link " + use + " cloud edge\n  switchboard ctl link " + use + " --segment tenants cloud customer-a",
			RunE: func(cmd *cobra.Command, args []string) error {
				req := &controlplanev1.TopologyLinkRequest{Segment: segment, GroupA: args[0], GroupB: args[1]}
				return o.mutate(cmd.Context(), a.out, func(ctx context.Context, c controlplanev1.ControlPlaneServiceClient) (*controlplanev1.MutationResponse, error) {
					if add {
						return c.AddTopologyLink(ctx, req)
					}
					return c.RemoveTopologyLink(ctx, req)
				})
			},
		}
		c.Flags().StringVar(&segment, "segment", "", "segment the topology link belongs to (default: the segment \"default\", made on first use)")
		return c
	}
	cmd.AddCommand(list, mutate("add", "Connect two groups in a segment (API mode)", true), mutate("remove", "Disconnect two groups in a segment (API mode)", false))
	return cmd
}

func ctlSegmentCmd(a *app, o *ctlOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "segment", Short: "Segments: isolated routing domains"}
	var resolved bool
	list := &cobra.Command{
		Use: "list", Short: "List segments and their topology links", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.call(cmd.Context(), func(ctx context.Context, c controlplanev1.ControlPlaneServiceClient) error {
				resp, err := c.ListSegments(ctx, &controlplanev1.ListSegmentsRequest{Resolved: resolved})
				if err != nil {
					return err
				}
				if err := o.print(a.out, resp, []string{"SEGMENT", "LINKS"}, len(resp.GetSegments()), func(i int) []string {
					s := resp.GetSegments()[i]
					var links []string
					for _, l := range s.GetLinks() {
						links = append(links, l.GetGroupA()+"<->"+l.GetGroupB())
					}
					return []string{s.GetName(), strings.Join(links, " ")}
				}); err != nil {
					return err
				}
				if resp.GetConfigMode() && o.output == "table" {
					// Else an operator who reads the file's links sees them missing.
					fmt.Fprintln(a.errOut, "config mode: the pairs the config file's segments connect among the groups registered now (a group with no node yet is not listed)")
				}
				return nil
			})
		},
	}
	list.Flags().BoolVar(&resolved, "resolved", false, "show the group pairs each segment connects now (\"*\" and \"$group\" expanded over the registered groups)")
	cmd.AddCommand(list)
	for _, add := range []bool{true, false} {
		use, short := "remove NAME", "Remove a segment and its links (API mode)"
		if add {
			use, short = "add NAME", "Add a segment (API mode)"
		}
		cmd.AddCommand(&cobra.Command{
			Use: use, Short: short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return o.mutate(cmd.Context(), a.out, func(ctx context.Context, c controlplanev1.ControlPlaneServiceClient) (*controlplanev1.MutationResponse, error) {
					if add {
						return c.AddSegment(ctx, &controlplanev1.SegmentRequest{Name: args[0]})
					}
					return c.RemoveSegment(ctx, &controlplanev1.SegmentRequest{Name: args[0]})
				})
			},
		})
	}
	return cmd
}

func ctlRouteCmd(a *app, o *ctlOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "route", Short: "Routes: subscriptions for a name over a link"}
	var node, dest string
	var states stateFlags
	list := &cobra.Command{
		Use: "list [NODE]", Short: "List routes (templates have source *); applied ones unless --all or --status", Args: cobra.MaximumNArgs(1),
		Example: "  switchboard ctl route list\n  switchboard ctl route list cloud/node-1 --all",
		RunE: func(cmd *cobra.Command, args []string) error {
			node, err := positionalOrFlag(args, node, "--node")
			if err != nil {
				return err
			}
			return o.call(cmd.Context(), func(ctx context.Context, c controlplanev1.ControlPlaneServiceClient) error {
				resp, err := c.ListRoutes(ctx, &controlplanev1.ListRoutesRequest{SourceNodeId: node, DestNodeId: dest, Statuses: states.statuses()})
				if err != nil {
					return err
				}
				return o.print(a.out, resp, []string{"ID", "SOURCE", "DEST", "NAME", "LINK", "STATUS", "MESSAGE"}, len(resp.GetRoutes()), func(i int) []string {
					r := resp.GetRoutes()[i]
					name := r.GetName()
					if r.ComponentId != nil {
						name += fmt.Sprintf(" (id %d)", r.GetComponentId())
					}
					return []string{fmt.Sprint(r.GetId()), r.GetSourceNodeId(), r.GetDestNodeId(), name, dash(r.GetLinkId()), r.GetStatus(), r.GetStatusMessage()}
				})
			})
		},
	}
	list.Flags().StringVar(&node, "node", "", "only routes installed on this node")
	list.Flags().StringVar(&dest, "dest", "", "only routes toward this node")
	states.register(list, "pending, applied, failed, deleted")
	var componentID int64 = -1
	var destNode string
	mutate := func(use, short string, add bool) *cobra.Command {
		c := &cobra.Command{
			Use: use + " NAME [DEST_NODE]", Short: short, Args: cobra.RangeArgs(1, 2),
			Example: "  switchboard ctl route " + use + " org/ns/service cloud/node-1",
			RunE: func(cmd *cobra.Command, args []string) error {
				if strings.Count(args[0], "/") != 2 {
					return usagef("route name %q: want three components c0/c1/c2", args[0])
				}
				dest, err := positionalOrFlag(args[1:], destNode, "--dest")
				if err != nil {
					return err
				}
				if dest == "" {
					return usagef("the node that serves the name is required: %s NAME DEST_NODE", use)
				}
				req := &controlplanev1.RouteRequest{Name: args[0], DestNodeId: dest}
				if componentID >= 0 {
					id := uint64(componentID)
					req.ComponentId = &id
				}
				return o.mutate(cmd.Context(), a.out, func(ctx context.Context, c controlplanev1.ControlPlaneServiceClient) (*controlplanev1.MutationResponse, error) {
					if add {
						return c.AddRoute(ctx, req)
					}
					return c.DeleteRoute(ctx, req)
				})
			},
		}
		c.Flags().StringVar(&destNode, "dest", "", "the node that serves the name, {group}/{node} (or the second argument)")
		c.Flags().Int64Var(&componentID, "component-id", -1, "optional component id (-1: none)")
		return c
	}
	// "delete" was this command's name before every ctl command said "remove": it
	// still works, unlisted, for scripts written then.
	oldDelete := mutate("delete", "Withdraw a wildcard route (old name of remove)", false)
	oldDelete.Hidden = true
	cmd.AddCommand(list, mutate("add", "Announce a name: a wildcard route every reachable node gets", true),
		mutate("remove", "Withdraw a wildcard route", false), oldDelete)
	return cmd
}

func ctlConnectionCmd(a *app, o *ctlOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "connection", Short: "Connections live on a node (asked from the node)"}
	var node string
	list := &cobra.Command{
		Use: "list NODE", Short: "List a node's live connections", Args: cobra.MaximumNArgs(1),
		Example: "  switchboard ctl connection list cloud/node-1",
		RunE: func(cmd *cobra.Command, args []string) error {
			node, err := requiredNode(args, node)
			if err != nil {
				return err
			}
			return o.call(cmd.Context(), func(ctx context.Context, c controlplanev1.ControlPlaneServiceClient) error {
				resp, err := c.ListNodeConnections(ctx, &controlplanev1.NodeRequest{NodeId: node})
				if err != nil {
					return err
				}
				return o.print(a.out, resp, []string{"LINK", "ENDPOINT", "CONN ID"}, len(resp.GetEntries()), func(i int) []string {
					e := resp.GetEntries()[i]
					return []string{e.GetLinkId(), e.GetEndpoint(), fmt.Sprint(e.GetConnId())}
				})
			})
		},
	}
	list.Flags().StringVar(&node, "node", "", "node id, {group}/{node} (or the argument)")
	cmd.AddCommand(list)
	return cmd
}

func ctlSubscriptionCmd(a *app, o *ctlOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "subscription", Short: "Subscriptions live on a node (asked from the node)"}
	var node string
	list := &cobra.Command{
		Use: "list NODE", Short: "List a node's live subscriptions", Args: cobra.MaximumNArgs(1),
		Example: "  switchboard ctl subscription list cloud/node-1",
		RunE: func(cmd *cobra.Command, args []string) error {
			node, err := requiredNode(args, node)
			if err != nil {
				return err
			}
			return o.call(cmd.Context(), func(ctx context.Context, c controlplanev1.ControlPlaneServiceClient) error {
				resp, err := c.ListNodeSubscriptions(ctx, &controlplanev1.NodeRequest{NodeId: node})
				if err != nil {
					return err
				}
				if o.output != "table" {
					return o.writeView(a.out, subscriptionsView(resp))
				}
				return o.print(a.out, resp, []string{"NAME", "COMPONENT ID", "LINK"}, len(resp.GetSubscriptions()), func(i int) []string {
					s := resp.GetSubscriptions()[i]
					id := "-"
					if s.ComponentId != nil {
						id = fmt.Sprint(s.GetComponentId())
					}
					return []string{s.GetComponent_0() + "/" + s.GetComponent_1() + "/" + s.GetComponent_2(), id, dash(s.GetLinkId())}
				})
			})
		},
	}
	list.Flags().StringVar(&node, "node", "", "node id, {group}/{node} (or the argument)")
	cmd.AddCommand(list)
	return cmd
}

// subscriptionView is a live subscription as -o json and yaml show it: the name as
// one string, as everywhere else, not the API's three components.
type subscriptionView struct {
	Name        string  `json:"name"`
	ComponentID *uint64 `json:"componentId,omitempty"`
	LinkID      string  `json:"linkId,omitempty"`
}

func subscriptionsView(resp *controllerv1.SubscriptionListResponse) any {
	subs := make([]subscriptionView, 0, len(resp.GetSubscriptions()))
	for _, s := range resp.GetSubscriptions() {
		subs = append(subs, subscriptionView{Name: s.GetComponent_0() + "/" + s.GetComponent_1() + "/" + s.GetComponent_2(),
			ComponentID: s.ComponentId, LinkID: s.GetLinkId()})
	}
	return struct {
		Subscriptions []subscriptionView `json:"subscriptions"`
	}{subs}
}

func (o *ctlOptions) mutate(ctx context.Context, out io.Writer, fn func(context.Context, controlplanev1.ControlPlaneServiceClient) (*controlplanev1.MutationResponse, error)) error {
	return o.call(ctx, func(ctx context.Context, c controlplanev1.ControlPlaneServiceClient) error {
		resp, err := fn(ctx, c)
		if err != nil {
			return err
		}
		if o.output != "table" {
			return o.writeStructured(out, resp)
		}
		_, err = fmt.Fprintln(out, resp.GetMessage())
		return err
	})
}

// print writes a response as JSON or YAML, or as a table of n rows built by row.
func (o *ctlOptions) print(out io.Writer, resp proto.Message, header []string, n int, row func(int) []string) error {
	if o.output != "table" {
		return o.writeStructured(out, resp)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for i := range n {
		fmt.Fprintln(tw, strings.Join(row(i), "\t"))
	}
	return tw.Flush()
}

func writeProtoJSON(out io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, string(b))
	return err
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
