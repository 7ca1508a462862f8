package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/switchboard-mesh/switchboard/cni"
)

func init() { subcommands = append(subcommands, newCNICmd) }

func newCNICmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cni",
		Short: "The CNI plugin that registers Kubernetes pods with this node's agent, and its installer",
		Long: `switchboard is also a CNI plugin. Chained last in the node's CNI configuration,
after the cluster's network plugin (Calico, Cilium, flannel, ...), it tells this node's
agent which namespace, name and addresses each pod got, so the agent can register the
pod. It never assigns addresses or changes the pod's network: it hands the previous
plugin's result on unchanged.

You do not run the plugin yourself. The container runtime (containerd, CRI-O) executes
/opt/cni/bin/switchboard with no arguments and CNI_COMMAND in the environment, once per
pod start, stop, check and garbage collection. The plugin talks to the agent over a Unix
socket; when the agent is not there, onAgentUnreachable decides: "allow" lets pods start
anyway (the agent catches up later), "fail" makes the runtime retry until it answers.

Put the plugin in place with "switchboard cni install", usually from a DaemonSet that
runs after the cluster's network plugin, and remove it with "switchboard cni uninstall".`,
		Example: `  switchboard cni install --wait 5m --keep
  switchboard cni uninstall
  CNI_COMMAND=VERSION switchboard cni`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Getenv("CNI_COMMAND") != "" {
				cni.Main() // stdout carries the CNI result or error; exits 1 on error
				return nil
			}
			return cmd.Help()
		},
	}
	cmd.AddCommand(newCNIInstallCmd(a), newCNIUninstallCmd(a))
	return cmd
}

type cniInstallFlags struct {
	opts            cni.InstallOptions
	policy          string
	keep            bool
	keepInterval    time.Duration
	uninstallOnExit bool
}

func addCNIDirFlags(cmd *cobra.Command, o *cni.InstallOptions) {
	fl := cmd.Flags()
	fl.StringVar(&o.BinDir, "bin-dir", cni.DefaultBinDir, "the runtime's CNI plugin directory: the binary is copied here as switchboard")
	fl.StringVar(&o.ConfDir, "conf-dir", cni.DefaultConfDir, "the runtime's CNI configuration directory")
	_ = cmd.MarkFlagDirname("bin-dir")
	_ = cmd.MarkFlagDirname("conf-dir")
}

func newCNIInstallCmd(a *app) *cobra.Command {
	var f cniInstallFlags
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Copy the plugin into the CNI directory and chain it into the node's CNI configuration",
		Long: `Copy this binary to --bin-dir/switchboard and add switchboard as the last plugin of
the network configuration the container runtime uses: the first *.conf, *.conflist or
*.json file in --conf-dir, in name order. A .conflist gets one more plugin; a
single-plugin .conf is turned into a .conflist of the same name holding the original
plugin and switchboard. Other plugins' settings are kept exactly as they were.

Running it again changes nothing unless the options changed: an existing switchboard
entry is replaced, never added twice. The cluster's network plugin must have written its
configuration first; --wait waits for it.

With --keep it stays running and installs again whenever the configuration directory
changes (the cluster's network plugin may rewrite its file without switchboard), and on
SIGTERM it uninstalls and exits 0 (--uninstall-on-exit=false keeps the plugin in place).
This is how a DaemonSet runs it.`,
		Example: `  switchboard cni install
  switchboard cni install --on-agent-unreachable fail --timeout 5s --wait 5m
  switchboard cni install --keep --conf-dir /host/etc/cni/net.d --bin-dir /host/opt/cni/bin`,
		Args: cobra.NoArgs,
	}
	addCNIDirFlags(cmd, &f.opts)
	fl := cmd.Flags()
	fl.StringVar(&f.opts.AgentSocket, "socket", cni.DefaultAgentSocket, "the agent's CNI socket, as the plugin will reach it on the node")
	fl.StringVar(&f.policy, "on-agent-unreachable", string(cni.DefaultPolicy), `when the agent does not answer: "allow" (pods start anyway) or "fail" (the runtime retries)`)
	fl.DurationVar(&f.opts.Timeout, "timeout", cni.DefaultTimeout, "how long the plugin waits for the agent on each call (at most 1m)")
	fl.DurationVar(&f.opts.Wait, "wait", 0, "how long to wait for the cluster's network plugin to write its CNI configuration (0: fail at once)")
	fl.BoolVar(&f.keep, "keep", false, "stay running, install again whenever the configuration directory changes, uninstall on SIGTERM")
	fl.DurationVar(&f.keepInterval, "keep-interval", 5*time.Second, "with --keep: how often to look at the configuration directory")
	fl.BoolVar(&f.uninstallOnExit, "uninstall-on-exit", true, "with --keep: uninstall when stopped")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return runCNIInstall(cmd, a, f) }
	return cmd
}

func runCNIInstall(cmd *cobra.Command, a *app, f cniInstallFlags) error {
	policy, err := cni.ParsePolicy(f.policy)
	if err != nil {
		return usagef("--on-agent-unreachable %q: %v", f.policy, err)
	}
	f.opts.OnAgentUnreachable = policy
	f.opts.Logger = a.logger()
	if err := f.opts.Validate(); err != nil {
		return usageError{err}
	}
	if !f.keep {
		changed, err := cni.InstallContext(cmd.Context(), f.opts)
		if errors.Is(err, cni.ErrNoConfig) && f.opts.Wait == 0 {
			return fmt.Errorf("%w (--wait waits for it)", err)
		}
		if err != nil {
			return err
		}
		fmt.Fprintln(a.out, installMessage(changed, "installed", "already installed: nothing changed"))
		return nil
	}
	if f.keepInterval <= 0 {
		return usagef("--keep-interval %s: must be positive", f.keepInterval)
	}
	if err := cni.KeepInstalled(cmd.Context(), f.opts, f.keepInterval); err != nil {
		return err
	}
	if !f.uninstallOnExit {
		return nil
	}
	_, err = cni.Uninstall(f.opts)
	return err
}

func newCNIUninstallCmd(a *app) *cobra.Command {
	var o cni.InstallOptions
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Remove the plugin from every CNI configuration and its binary from the CNI directory",
		Long: `Remove every switchboard entry from the network configurations in --conf-dir and
delete --bin-dir/switchboard. Other plugins' settings are kept exactly as they were; a
configuration converted from a .conf stays a .conflist. Running it again changes nothing.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			o.Logger = a.logger()
			changed, err := cni.Uninstall(o)
			if err != nil {
				return err
			}
			fmt.Fprintln(a.out, installMessage(changed, "uninstalled", "not installed: nothing to remove"))
			return nil
		},
	}
	addCNIDirFlags(cmd, &o)
	return cmd
}

func installMessage(changed bool, did, nothing string) string {
	if changed {
		return did
	}
	return nothing
}
