package main

import (
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/switchboard-mesh/switchboard/agent"
	"github.com/switchboard-mesh/switchboard/agent/pods"
)

// podFlags turn on the agent's CNI server: the node's pods register themselves.
type podFlags struct {
	socket       string
	stateDir     string
	kubeconfig   string
	nodeName     string
	cluster      string
	selector     string
	ttl          time.Duration
	resync       time.Duration
	requireReady bool
}

func (f *podFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.socket, "cni-socket", "", "serve the CNI plugin (switchboard cni) on this Unix socket and register the node's pods (e.g. /run/switchboard/cni.sock; empty: off)")
	fl.StringVar(&f.stateDir, "cni-state-dir", "/var/lib/switchboard/cni", "where the pods' network attachments are recorded; keep it across agent restarts")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig for reading the node's pods (empty: the in-cluster service account, when running in a pod)")
	fl.StringVar(&f.nodeName, "node-name", os.Getenv("NODE_NAME"), "this node's Kubernetes name: its pods are read, and it owns their endpoints (default $NODE_NAME)")
	fl.StringVar(&f.cluster, "pod-cluster", "", "registry cluster of the pods' endpoints (required with --cni-socket)")
	fl.StringVar(&f.selector, "pod-selector", pods.KeyRegister+"=true", "label selector of the pods to register (a pod's "+pods.KeyRegister+" annotation overrides it)")
	fl.DurationVar(&f.ttl, "pod-ttl", pods.DefaultTTL, "TTL of the pods' endpoints: how long one outlives an agent that died")
	fl.DurationVar(&f.resync, "pod-resync", pods.DefaultResync, "how often the pods are compared with what is registered (bounds how long an entry outlives a pod whose DEL was lost)")
	fl.BoolVar(&f.requireReady, "pod-require-ready", true, "register a pod only while its Ready condition is True (false: as soon as it runs)")
}

func (f *podFlags) enabled() bool { return f.socket != "" }

func (f *podFlags) validate() error {
	if !f.enabled() {
		return nil
	}
	switch {
	case f.cluster == "":
		return usagef("--cni-socket needs --pod-cluster: the registry cluster of the pods' endpoints")
	case f.nodeName == "":
		return usagef("--cni-socket needs --node-name (or $NODE_NAME): the node whose pods to register")
	case f.stateDir == "":
		return usagef("--cni-state-dir: must not be empty with --cni-socket")
	case f.ttl <= 0:
		return usagef("--pod-ttl %s: must be positive", f.ttl)
	case f.resync < time.Second:
		// Each resync lists and compares every pod of the node: below a second it
		// would only burn the CPU.
		return usagef("--pod-resync %s: must be at least 1s", f.resync)
	}
	if _, err := labels.Parse(f.selector); err != nil {
		return usagef("--pod-selector %q: %v", f.selector, err)
	}
	return nil
}

// source returns the agent source that serves the CNI socket and keeps the node's
// pods registered.
func (f *podFlags) source(log *slog.Logger) (agent.NewSource, error) {
	sel, err := labels.Parse(f.selector)
	if err != nil {
		return nil, usagef("--pod-selector %q: %v", f.selector, err)
	}
	client, err := f.client(log)
	if err != nil {
		return nil, err
	}
	return func(a *agent.Agent, reg prometheus.Registerer) (agent.Source, error) {
		return pods.New(pods.Config{StateDir: f.stateDir, Socket: f.socket, NodeName: f.nodeName, Cluster: f.cluster,
			Selector: sel, TTL: f.ttl, Resync: f.resync, RequireReady: &f.requireReady, Client: client,
			Sink: a, Logger: log, Metrics: reg})
	}, nil
}

// client reads the node's pods: from --kubeconfig, else the in-cluster service
// account. Outside a cluster without --kubeconfig there is none, and the agent says so.
func (f *podFlags) client(log *slog.Logger) (kubernetes.Interface, error) {
	c, err := kubeClient(f.kubeconfig, "switchboard-agent", log)
	if errors.Is(err, rest.ErrNotInCluster) {
		log.Warn("no Kubernetes API: not in a cluster and no --kubeconfig; pods are recorded but not registered")
		return nil, nil
	}
	return c, err
}
