// Package cni is `switchboard cni`: a chained CNI plugin (spec 1.1) that tells the
// node's agent which addresses a Kubernetes pod was given, and the installer that adds
// the plugin, last, to the node's CNI configuration.
//
// The plugin runs once per CNI call as a short-lived process started by the container
// runtime. It never assigns addresses and never changes the result it is handed: ADD
// passes the previous plugin's result through unchanged after recording the pod's
// addresses with the agent over the PodNetwork gRPC API on a Unix socket
// (gen/switchboard/cni/v1). When the agent cannot be reached, onAgentUnreachable
// decides whether the pod starts anyway ("allow") or the runtime retries ("fail").
//
// The package owns: the plugin's network configuration (ParseConfig), its commands
// (Plugin) and entry point (Main, which leaves the CNI protocol to the CNI library's
// skel), and editing a node's CNI configuration directory (Install, Uninstall,
// KeepInstalled).
//
// Because it runs on the critical path of every pod start, it must keep its imports
// small: it must not import agent/, registrar/, registry/, controlplane/ or
// dataplane/. It uses only the CNI library (skel, types, version), the generated
// PodNetwork client and gRPC.
package cni
