package dynamodb

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/awsaccess"
	"github.com/switchboard-mesh/switchboard/internal/dynamotest"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/registrytest"
)

func TestConformance(t *testing.T) {
	srv := dynamotest.Start(t)
	registrytest.Run(t, func() (registry.Registry, error) {
		return Open(context.Background(), testConfig(srv))
	}, registrytest.Options{})
	// The suite's large batch (300 ops) must have been split, never rejected by the
	// server's 100-item limit.
	for _, r := range srv.Requests() {
		if r.Op == "TransactWriteItems" && r.Items > maxTxnItems {
			t.Errorf("a transaction carried %d items", r.Items)
		}
	}
}

func TestBackendRegistered(t *testing.T) {
	i := slices.IndexFunc(registry.Backends(), func(b registry.Backend) bool { return b.Name == "dynamodb" })
	if i < 0 {
		t.Fatal("backend dynamodb is not registered")
	}
	want := map[string][2]string{ // name -> default, usage (empty usage: any)
		ParamTable:       {"switchboard-endpoints", ""},
		ParamRegion:      {"us-east-1", "AWS region"},
		ParamEndpoint:    {"", ""},
		ParamCreateTable: {"false", ""},
		awsaccess.Param:  {"false", awsaccess.ParamUsage}, // shared with the cloudmap backend
	}
	params := registry.Backends()[i].Params
	if len(params) != len(want) {
		t.Errorf("backend declares %d params, want %d", len(params), len(want))
	}
	for _, p := range params {
		w, ok := want[p.Name]
		switch {
		case !ok:
			t.Errorf("unexpected param %q", p.Name)
		case p.Default != w[0]:
			t.Errorf("param %s default %q, want %q", p.Name, p.Default, w[0])
		case w[1] != "" && p.Usage != w[1]:
			t.Errorf("param %s usage %q, want %q (shared with the cloudmap backend)", p.Name, p.Usage, w[1])
		case p.Usage == "":
			t.Errorf("param %s has no usage text", p.Name)
		}
	}
}

// TestOpenByName opens the backend as commands do: by name, with flag values, and
// credentials from the standard chain (here the environment).
func TestOpenByName(t *testing.T) {
	srv := dynamotest.Start(t)
	dynamotest.SetEnv(t)
	ctx := testCtx(t)
	r, err := registry.Open(ctx, "dynamodb", srv.Params("by-name"), nil)
	if err != nil {
		t.Fatalf("registry.Open: %v", err)
	}
	defer r.Close()
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	if err := r.Apply(ctx, []registry.Op{registry.Register(a)}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	got, err := r.List(ctx, endpoint.Filter{Service: "web"})
	if err != nil || len(got) != 1 || !endpoint.Equal(got[0], a) {
		t.Fatalf("List = %v, %v; want [%v]", got, err, a)
	}
	if _, err := r.Watch(ctx, endpoint.Filter{}); !errors.Is(err, registry.ErrNoWatch) {
		t.Errorf("Watch = %v, want registry.ErrNoWatch: DynamoDB has no change feed here", err)
	}
}

func TestOpenRejectsBadParams(t *testing.T) {
	srv := dynamotest.Start(t)
	dynamotest.SetEnv(t)
	for _, c := range []struct {
		params map[string]string
		want   string
	}{
		{map[string]string{ParamCreateTable: "maybe"}, ParamCreateTable},
		{map[string]string{ParamEndpoint: "127.0.0.1:8000"}, ParamEndpoint},
		{map[string]string{ParamEndpoint: srv.URL, ParamTable: "a b"}, ParamTable},
		{map[string]string{ParamEndpoint: srv.URL, ParamTable: "absent"}, "--" + ParamCreateTable},
	} {
		_, err := registry.Open(testCtx(t), "dynamodb", c.params, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%v) = %v, want an error naming %q", c.params, err, c.want)
		}
	}
}

func TestListRejectsBadFilter(t *testing.T) {
	r := openTest(t, dynamotest.Start(t))
	_, err := r.List(testCtx(t), endpoint.Filter{Service: "9web"})
	if !errors.Is(err, endpoint.ErrInvalid) || !strings.Contains(err.Error(), "service") {
		t.Fatalf("List with a bad service = %v, want an invalid-endpoint error naming the service", err)
	}
}
