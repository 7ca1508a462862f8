package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	controlplanev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controlplane/v1"
)

func ctlGroupCmd(a *app, o *ctlOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "group", Short: "Groups of data-plane nodes, and their registration secrets"}
	cmd.AddCommand(&cobra.Command{
		Use: "list", Short: "List groups with their nodes and where their registration secret comes from", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.call(cmd.Context(), func(ctx context.Context, c controlplanev1.ControlPlaneServiceClient) error {
				resp, err := c.ListGroups(ctx, &controlplanev1.ListGroupsRequest{})
				if err != nil {
					return err
				}
				return o.print(a.out, resp, []string{"GROUP", "NODES", "SECRET"}, len(resp.GetGroups()), func(i int) []string {
					g := resp.GetGroups()[i]
					var nodes []string
					for _, n := range g.GetNodes() {
						name := n.GetId()
						if !n.GetConnected() {
							name += " (disconnected)"
						}
						nodes = append(nodes, name)
					}
					return []string{g.GetName(), dash(strings.Join(nodes, ", ")), dash(g.GetSecretSource())}
				})
			})
		},
	})
	cmd.AddCommand(ctlGroupSecretCmd(a, o))
	return cmd
}

func ctlGroupSecretCmd(a *app, o *ctlOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "secret",
		Short: "Registration secrets of groups (API mode, registration_auth type shared_secret)",
		Long: `Add, rotate and remove the secret a group's nodes prove their membership with when
they register. The control plane keeps these secrets in its database; secrets in its
config file cannot be changed here. Rotating lets nodes already registered stay
connected; removing disconnects the group's nodes, which cannot register again.

The secret is read from --from-file (- for standard input), or --generate makes a
random one and prints it once. The control plane accepts a secret only over TLS or
from a loopback address.`,
	}
	mutate := func(use, short string, rotate bool) *cobra.Command {
		var fromFile string
		var generate bool
		c := &cobra.Command{
			Use: use + " GROUP", Short: short, Args: cobra.ExactArgs(1),
			Example: "  switchboard ctl group secret " + use + " edge --generate\n" +
				"  printenv EDGE_SECRET | switchboard ctl group secret " + use + " edge --from-file -",
			RunE: func(cmd *cobra.Command, args []string) error {
				if generate == (fromFile != "") {
					return usagef("give the secret with --from-file PATH (- for standard input) or --generate, not both")
				}
				secret, err := readSecret(cmd.InOrStdin(), fromFile, generate)
				if err != nil {
					return err
				}
				req := &controlplanev1.GroupSecretRequest{Group: args[0], Secret: secret}
				err = o.mutate(cmd.Context(), a.out, func(ctx context.Context, c controlplanev1.ControlPlaneServiceClient) (*controlplanev1.MutationResponse, error) {
					if rotate {
						return c.RotateGroupSecret(ctx, req)
					}
					return c.AddGroupSecret(ctx, req)
				})
				if err == nil && generate {
					// Only now: a secret the control plane refused is worth nothing.
					fmt.Fprintf(a.out, "secret: %s\n", secret)
				}
				return err
			},
		}
		c.Flags().StringVar(&fromFile, "from-file", "", "file holding the secret alone, at least 32 bytes (- reads standard input)")
		c.Flags().BoolVar(&generate, "generate", false, "make a random secret and print it")
		return c
	}
	remove := &cobra.Command{
		Use: "remove GROUP", Short: "Remove a group's secret and disconnect its nodes", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.mutate(cmd.Context(), a.out, func(ctx context.Context, c controlplanev1.ControlPlaneServiceClient) (*controlplanev1.MutationResponse, error) {
				return c.RemoveGroupSecret(ctx, &controlplanev1.GroupRequest{Group: args[0]})
			})
		},
	}
	cmd.AddCommand(mutate("add", "Give a group its registration secret", false),
		mutate("rotate", "Replace a group's registration secret", true), remove)
	return cmd
}

// readSecret returns a new random secret, or the one in path ("-": stdin).
func readSecret(stdin io.Reader, path string, generate bool) (string, error) {
	if generate {
		var b [32]byte
		_, _ = rand.Read(b[:]) // crypto/rand never fails on supported platforms
		return base64.RawURLEncoding.EncodeToString(b[:]), nil
	}
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(io.LimitReader(stdin, 4096))
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return "", usagef("--from-file: %v", err)
	}
	secret := strings.TrimSpace(string(data))
	if secret == "" || strings.ContainsAny(secret, "\r\n") {
		return "", usagef("--from-file %s: want the secret alone on one line", path)
	}
	return secret, nil
}
