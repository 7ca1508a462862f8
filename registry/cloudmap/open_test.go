package cloudmap

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/internal/awsaccess"
	"github.com/switchboard-mesh/switchboard/internal/cloudmaptest"
	"github.com/switchboard-mesh/switchboard/registry"
)

func TestParamsDeclared(t *testing.T) {
	var b registry.Backend
	for _, x := range registry.Backends() {
		if x.Name == "cloudmap" {
			b = x
		}
	}
	if b.Open == nil {
		t.Fatal("cloudmap backend not registered")
	}
	want := map[string][2]string{ // name -> default, usage (usage checked only when set)
		"cloudmap-namespace":         {"switchboard", ""},
		"aws-region":                 {"us-east-1", "AWS region"},
		"cloudmap-endpoint":          {"", ""},
		"cloudmap-create-namespace":  {"false", ""},
		"cloudmap-operation-timeout": {"1m0s", ""},
		awsaccess.Param:              {"false", awsaccess.ParamUsage}, // shared with the dynamodb backend
	}
	for _, p := range b.Params {
		w, ok := want[p.Name]
		if !ok {
			t.Errorf("unexpected parameter %s", p.Name)
			continue
		}
		if p.Default != w[0] || (w[1] != "" && p.Usage != w[1]) || p.Usage == "" {
			t.Errorf("parameter %s: default %q usage %q, want default %q usage %q", p.Name, p.Default, p.Usage, w[0], w[1])
		}
		delete(want, p.Name)
	}
	if len(want) != 0 {
		t.Errorf("parameters not declared: %v", want)
	}
}

func TestOpenRejectsBadParams(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, params := range map[string]map[string]string{
		"cloudmap-operation-timeout": {"cloudmap-operation-timeout": "soon"},
		"must be a positive":         {"cloudmap-operation-timeout": "0s"},
		"cloudmap-create-namespace":  {"cloudmap-create-namespace": "maybe"},
		"cloudmap-endpoint":          {"cloudmap-endpoint": "localhost:4566"},
		"aws-region":                 {"aws-region": ""},
	} {
		_, err := registry.Open(ctx, "cloudmap", params, nil)
		if !errors.Is(err, registry.ErrBadParam) || !strings.Contains(err.Error(), name) {
			t.Errorf("Open(%v) = %v, want registry.ErrBadParam naming %s", params, err, name)
		}
	}
}

func TestNamespaceResolution(t *testing.T) {
	fake := cloudmaptest.NewServer(cloudmaptest.Options{})
	defer fake.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	open := func(ns string, create bool) (*registry.Front, error) {
		return New(ctx, Options{Client: fake.NewClient(), Namespace: ns, CreateNamespace: create})
	}
	if _, err := open("missing", false); err == nil || !strings.Contains(err.Error(), "cloudmap-create-namespace") {
		t.Fatalf("missing namespace without create: %v, want an error pointing at cloudmap-create-namespace", err)
	}
	created, err := open("team-a", true)
	if err != nil {
		t.Fatal(err)
	}
	defer created.Close()
	if id := created.Driver().(*driver).NamespaceID(); !strings.HasPrefix(id, "ns-") {
		t.Fatalf("created namespace id %q", id)
	}
	createdID := created.Driver().(*driver).NamespaceID()
	for _, ref := range []string{"team-a", createdID} {
		r, err := open(ref, true)
		if err != nil {
			t.Fatalf("open %s: %v", ref, err)
		}
		if got := r.Driver().(*driver).NamespaceID(); got != createdID {
			t.Fatalf("open %s resolved to %s, want %s", ref, got, createdID)
		}
		_ = r.Close()
	}
	if n := fake.Calls("CreateHttpNamespace"); n != 1 {
		t.Fatalf("%d CreateHttpNamespace calls, want 1 (later opens find it)", n)
	}
	if _, err := open("ns-0000000000000bad", false); err == nil {
		t.Fatal("an unknown namespace id was accepted")
	}
}

// TestOpenThroughRegistry checks the parameters reach the backend: a namespace id
// given as cloudmap-namespace is used as is, through the default credential chain.
func TestOpenThroughRegistry(t *testing.T) {
	cloudmaptest.SetCredentialsEnv(t)
	fake := cloudmaptest.NewServer(cloudmaptest.Options{})
	defer fake.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first, err := registry.Open(ctx, "cloudmap", map[string]string{
		"cloudmap-endpoint": fake.URL(), "cloudmap-create-namespace": "true", "aws-region": "eu-west-1",
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	nsID := first.Driver().(*driver).NamespaceID()
	again, err := registry.Open(ctx, "cloudmap", map[string]string{"cloudmap-endpoint": fake.URL(), "cloudmap-namespace": nsID}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if got := again.Driver().(*driver).NamespaceID(); got != nsID {
		t.Fatalf("opened by id: namespace %s, want %s", got, nsID)
	}
	if got := fake.Calls("GetNamespace"); got != 1 {
		t.Fatalf("opening by id made %d GetNamespace calls, want 1", got)
	}
}

// TestInitCreatesNamespace: `switchboard registry init` creates the namespace even
// without cloudmap-create-namespace, and a later open finds it.
func TestInitCreatesNamespace(t *testing.T) {
	cloudmaptest.SetCredentialsEnv(t)
	fake := cloudmaptest.NewServer(cloudmaptest.Options{})
	defer fake.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	params := map[string]string{"cloudmap-endpoint": fake.URL(), "cloudmap-namespace": "inited"}
	if _, err := registry.Open(ctx, "cloudmap", params, nil); err == nil {
		t.Fatal("opened a namespace that does not exist yet")
	}
	if err := registry.Init(ctx, "cloudmap", params, nil); err != nil {
		t.Fatalf("Init: %v", err)
	}
	r, err := registry.Open(ctx, "cloudmap", params, nil)
	if err != nil {
		t.Fatalf("Open after Init: %v", err)
	}
	defer r.Close()
	if n := fake.Calls("CreateHttpNamespace"); n != 1 {
		t.Fatalf("%d CreateHttpNamespace calls, want 1", n)
	}
}
