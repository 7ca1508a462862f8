package main

import (
	"context"
	"strings"

	"github.com/spf13/cobra"

	controlplanev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controlplane/v1"
)

// Shell completion of node ids and segment names asks the control plane (--server,
// with the credentials given so far on the command line): the values only it knows.
// A control plane that does not answer completes nothing, quietly: completion must
// never print an error into the user's shell.

// completeNodes lists node ids, {group}/{node}.
func (o *ctlOptions) completeNodes(cmd *cobra.Command, _ []string, prefix string) ([]string, cobra.ShellCompDirective) {
	var ids []string
	_ = o.call(completionContext(cmd), func(ctx context.Context, c controlplanev1.ControlPlaneServiceClient) error {
		resp, err := c.ListNodes(ctx, &controlplanev1.ListNodesRequest{})
		for _, n := range resp.GetNodes() {
			ids = append(ids, n.GetId())
		}
		return err
	})
	return withPrefix(ids, prefix), cobra.ShellCompDirectiveNoFileComp
}

// completeSegments lists segment names.
func (o *ctlOptions) completeSegments(cmd *cobra.Command, _ []string, prefix string) ([]string, cobra.ShellCompDirective) {
	var names []string
	_ = o.call(completionContext(cmd), func(ctx context.Context, c controlplanev1.ControlPlaneServiceClient) error {
		resp, err := c.ListSegments(ctx, &controlplanev1.ListSegmentsRequest{})
		for _, s := range resp.GetSegments() {
			names = append(names, s.GetName())
		}
		return err
	})
	return withPrefix(names, prefix), cobra.ShellCompDirectiveNoFileComp
}

func completionContext(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}

func withPrefix(values []string, prefix string) []string {
	var out []string
	for _, v := range values {
		if strings.HasPrefix(v, prefix) {
			out = append(out, v)
		}
	}
	return out
}

// nodeFlags and segmentFlags are the ctl flags whose values are node ids and
// segment names.
var (
	nodeFlags    = []string{"node", "source", "dest"}
	segmentFlags = []string{"segment"}
)

// nodeArgCommands and segmentArgCommands take a node id or a segment name as their
// first argument, by command path below ctl.
var (
	nodeArgCommands    = map[string]bool{"route list": true, "connection list": true, "subscription list": true}
	segmentArgCommands = map[string]bool{"segment remove": true}
)

// addCompletions registers the completions on every command below ctl, the command
// newCtlCmd makes.
func (o *ctlOptions) addCompletions(ctl *cobra.Command) { o.addCompletionsAt(ctl, "") }

func (o *ctlOptions) addCompletionsAt(cmd *cobra.Command, path string) {
	for _, c := range cmd.Commands() {
		o.addCompletionsAt(c, strings.TrimSpace(path+" "+c.Name()))
	}
	for _, name := range nodeFlags {
		if cmd.LocalNonPersistentFlags().Lookup(name) != nil {
			_ = cmd.RegisterFlagCompletionFunc(name, o.completeNodes)
		}
	}
	for _, name := range segmentFlags {
		if cmd.LocalNonPersistentFlags().Lookup(name) != nil {
			_ = cmd.RegisterFlagCompletionFunc(name, o.completeSegments)
		}
	}
	switch {
	case nodeArgCommands[path]:
		cmd.ValidArgsFunction = firstArg(o.completeNodes)
	case segmentArgCommands[path]:
		cmd.ValidArgsFunction = firstArg(o.completeSegments)
	}
}

// firstArg completes the first argument with fn, and nothing after it.
func firstArg(fn cobra.CompletionFunc) cobra.CompletionFunc {
	return func(c *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return fn(c, args, prefix)
	}
}
