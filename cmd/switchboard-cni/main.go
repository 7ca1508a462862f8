// Command switchboard-cni is the CNI plugin alone: what `switchboard cni install`
// copies into the node's CNI plugin directory when it finds it next to the
// switchboard binary. The container runtime starts the plugin once per pod and
// command, so its start-up is on every pod's critical path: this binary links only
// the plugin (about 15 MB, 1.5 ms of package initialisation), where the whole
// switchboard binary, which can serve as the plugin too, is ten times larger and
// initialises for about 17 ms (docs/kubernetes.md).
//
// It must import nothing but package cni.
package main

import "github.com/switchboard-mesh/switchboard/cni"

func main() { cni.Main() }
