package main

import (
	"fmt"
	"log/slog"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/switchboard-mesh/switchboard/internal/buildinfo"
)

// kubeClient connects to the Kubernetes API with the kubeconfig file, or, without
// one, with the pod's service account; outside a pod that is rest.ErrNotInCluster,
// which each command words its own way.
func kubeClient(kubeconfig, userAgent string, log *slog.Logger) (kubernetes.Interface, error) {
	var rc *rest.Config
	var err error
	if kubeconfig == "" {
		if rc, err = rest.InClusterConfig(); err != nil {
			return nil, err
		}
	} else if rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
		return nil, usageError{fmt.Errorf("--kubeconfig: %w", err)}
	}
	rc.UserAgent = userAgent + "/" + buildinfo.String()
	// client-go logs through klog: send it to the command's log, in its format.
	klog.SetSlogLogger(log.With("component", "client-go"))
	return kubernetes.NewForConfig(rc)
}
