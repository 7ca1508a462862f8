package cni

import (
	"fmt"
	"strings"
)

// podArgs is the Kubernetes pod behind an attachment, as the kubelet passes it to the
// runtime and the runtime to every plugin in CNI_ARGS.
type podArgs struct {
	Namespace string // K8S_POD_NAMESPACE
	Name      string // K8S_POD_NAME
	UID       string // K8S_POD_UID; older runtimes do not send it
}

// isPod reports whether the attachment belongs to a Kubernetes pod: without a
// namespace and a name there is nothing to register it as.
func (p podArgs) isPod() bool { return p.Namespace != "" && p.Name != "" }

// parseCNIArgs reads CNI_ARGS ("K=V;K=V"). Keys other than the pod's are ignored,
// as types.CommonArgs with IgnoreUnknown does: runtimes send their own (for example
// IgnoreUnknown and K8S_POD_INFRA_CONTAINER_ID). Empty pairs are skipped; a pair
// without "=" is an error, since then the runtime and this plugin disagree on the
// format and guessing could name the wrong pod.
func parseCNIArgs(s string) (podArgs, error) {
	var p podArgs
	for pair := range strings.SplitSeq(s, ";") {
		if pair == "" {
			continue
		}
		key, value, ok := strings.Cut(pair, "=")
		if !ok {
			return podArgs{}, fmt.Errorf("CNI_ARGS: %q is not KEY=VALUE", pair)
		}
		switch key {
		case "K8S_POD_NAMESPACE":
			p.Namespace = value
		case "K8S_POD_NAME":
			p.Name = value
		case "K8S_POD_UID":
			p.UID = value
		}
	}
	return p, nil
}
