package cloudmaptest_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"
	"github.com/aws/aws-sdk-go-v2/service/servicediscovery/types"
	"github.com/aws/smithy-go"

	"github.com/switchboard-mesh/switchboard/internal/cloudmaptest"
)

var attrs = map[string]string{"AWS_INSTANCE_IPV4": "10.0.0.1"}

func setup(t *testing.T, opts cloudmaptest.Options) (*cloudmaptest.Server, *sd.Client, context.Context) {
	t.Helper()
	s := cloudmaptest.NewServer(opts)
	t.Cleanup(s.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return s, s.NewClient(), ctx
}

// newNamespace creates a namespace and polls its operation to success.
func newNamespace(t *testing.T, ctx context.Context, c *sd.Client, name string) string {
	t.Helper()
	out, err := c.CreateHttpNamespace(ctx, &sd.CreateHttpNamespaceInput{Name: aws.String(name)})
	if err != nil {
		t.Fatalf("CreateHttpNamespace: %v", err)
	}
	op := pollDone(t, ctx, c, *out.OperationId)
	if op.Status != types.OperationStatusSuccess {
		t.Fatalf("namespace operation ended %s", op.Status)
	}
	return op.Targets["NAMESPACE"]
}

func newService(t *testing.T, ctx context.Context, c *sd.Client, nsID, name string) string {
	t.Helper()
	out, err := c.CreateService(ctx, &sd.CreateServiceInput{Name: aws.String(name), NamespaceId: aws.String(nsID), Type: types.ServiceTypeOptionHttp})
	if err != nil {
		t.Fatalf("CreateService %s: %v", name, err)
	}
	return *out.Service.Id
}

// statuses polls an operation n times and returns what each poll said.
func statuses(t *testing.T, ctx context.Context, c *sd.Client, opID string, n int) []string {
	t.Helper()
	var got []string
	for range n {
		out, err := c.GetOperation(ctx, &sd.GetOperationInput{OperationId: aws.String(opID)})
		if err != nil {
			t.Fatalf("GetOperation: %v", err)
		}
		got = append(got, string(out.Operation.Status))
	}
	return got
}

func pollDone(t *testing.T, ctx context.Context, c *sd.Client, opID string) *types.Operation {
	t.Helper()
	for range 20 {
		out, err := c.GetOperation(ctx, &sd.GetOperationInput{OperationId: aws.String(opID)})
		if err != nil {
			t.Fatalf("GetOperation: %v", err)
		}
		if s := out.Operation.Status; s == types.OperationStatusSuccess || s == types.OperationStatusFail {
			return out.Operation
		}
	}
	t.Fatalf("operation %s never finished", opID)
	return nil
}

func register(t *testing.T, ctx context.Context, c *sd.Client, svcID, id string, attrs map[string]string) string {
	t.Helper()
	out, err := c.RegisterInstance(ctx, &sd.RegisterInstanceInput{ServiceId: aws.String(svcID), InstanceId: aws.String(id), Attributes: attrs})
	if err != nil {
		t.Fatalf("RegisterInstance %s: %v", id, err)
	}
	return *out.OperationId
}

func listIDs(t *testing.T, ctx context.Context, c *sd.Client, svcID string) ([]string, int) {
	t.Helper()
	var ids []string
	pages := 0
	p := sd.NewListInstancesPaginator(c, &sd.ListInstancesInput{ServiceId: aws.String(svcID)})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			t.Fatalf("ListInstances: %v", err)
		}
		pages++
		for _, in := range out.Instances {
			ids = append(ids, *in.Id)
		}
	}
	return ids, pages
}

func TestOperationLifecycle(t *testing.T) {
	s, c, ctx := setup(t, cloudmaptest.Options{})
	out, err := c.CreateHttpNamespace(ctx, &sd.CreateHttpNamespaceInput{Name: aws.String("life")})
	if err != nil {
		t.Fatal(err)
	}
	if got := statuses(t, ctx, c, *out.OperationId, 3); strings.Join(got, ",") != "SUBMITTED,PENDING,SUCCESS" {
		t.Fatalf("namespace operation statuses = %v, want SUBMITTED,PENDING,SUCCESS", got)
	}
	nss, err := c.ListNamespaces(ctx, &sd.ListNamespacesInput{})
	if err != nil || len(nss.Namespaces) != 1 || *nss.Namespaces[0].Name != "life" || nss.Namespaces[0].Type != types.NamespaceTypeHttp {
		t.Fatalf("ListNamespaces = %+v, %v; want the one HTTP namespace", nss, err)
	}
	nsID := *nss.Namespaces[0].Id
	svcID := newService(t, ctx, c, nsID, "web")
	opID := register(t, ctx, c, svcID, "i-1", map[string]string{"AWS_INSTANCE_IPV4": "10.0.0.1", "AWS_INSTANCE_PORT": "80"})
	if got := statuses(t, ctx, c, opID, 2); strings.Join(got, ",") != "SUBMITTED,PENDING" {
		t.Fatalf("register statuses = %v", got)
	}
	if _, ok := s.Instance("i-1"); ok {
		t.Fatal("instance visible before its operation succeeded")
	}
	op := pollDone(t, ctx, c, opID)
	if op.Status != types.OperationStatusSuccess || op.Type != types.OperationTypeRegisterInstance ||
		op.Targets["INSTANCE"] != "i-1" || op.Targets["SERVICE"] != svcID || op.CreateDate == nil {
		t.Fatalf("finished operation = %+v", op)
	}
	got, err := c.GetInstance(ctx, &sd.GetInstanceInput{ServiceId: aws.String(svcID), InstanceId: aws.String("i-1")})
	if err != nil || got.Instance.Attributes["AWS_INSTANCE_IPV4"] != "10.0.0.1" {
		t.Fatalf("GetInstance = %+v, %v", got, err)
	}
}

func TestFailAndHold(t *testing.T) {
	s, c, ctx := setup(t, cloudmaptest.Options{})
	svcID := newService(t, ctx, c, newNamespace(t, ctx, c, "fh"), "web")

	s.FailNext("bad", "INTERNAL_FAILURE", "injected")
	op := pollDone(t, ctx, c, register(t, ctx, c, svcID, "bad", attrs))
	if op.Status != types.OperationStatusFail || aws.ToString(op.ErrorCode) != "INTERNAL_FAILURE" || aws.ToString(op.ErrorMessage) != "injected" {
		t.Fatalf("failed operation = %+v", op)
	}
	if _, ok := s.Instance("bad"); ok {
		t.Fatal("a FAILed registration took effect")
	}
	// The failure is used up: the next registration succeeds.
	if op := pollDone(t, ctx, c, register(t, ctx, c, svcID, "bad", attrs)); op.Status != types.OperationStatusSuccess {
		t.Fatalf("second registration ended %s", op.Status)
	}

	s.Hold("slow", true)
	opID := register(t, ctx, c, svcID, "slow", attrs)
	for i, st := range statuses(t, ctx, c, opID, 6) {
		if st != "PENDING" {
			t.Fatalf("held operation poll %d = %s, want PENDING", i, st)
		}
	}
	s.Hold("slow", false)
	if op := pollDone(t, ctx, c, opID); op.Status != types.OperationStatusSuccess {
		t.Fatalf("released operation ended %s", op.Status)
	}
}

func TestOperationsOnOneInstanceFinishInOrder(t *testing.T) {
	s, c, ctx := setup(t, cloudmaptest.Options{})
	svcID := newService(t, ctx, c, newNamespace(t, ctx, c, "order"), "web")
	reg := register(t, ctx, c, svcID, "i-1", attrs)
	// Accepted although the registration has not finished yet.
	dereg, err := c.DeregisterInstance(ctx, &sd.DeregisterInstanceInput{ServiceId: aws.String(svcID), InstanceId: aws.String("i-1")})
	if err != nil {
		t.Fatalf("DeregisterInstance during a pending registration: %v", err)
	}
	pollDone(t, ctx, c, *dereg.OperationId)
	if op := pollDone(t, ctx, c, reg); op.Status != types.OperationStatusSuccess {
		t.Fatalf("registration ended %s", op.Status)
	}
	if _, ok := s.Instance("i-1"); ok {
		t.Fatal("the earlier registration was applied after the later deregistration")
	}
}

func TestPaging(t *testing.T) {
	_, c, ctx := setup(t, cloudmaptest.Options{PageSize: 3, PendingPolls: -1})
	nsA := newNamespace(t, ctx, c, "a")
	nsB := newNamespace(t, ctx, c, "b")
	svcID := newService(t, ctx, c, nsA, "web")
	for i := range 10 {
		pollDone(t, ctx, c, register(t, ctx, c, svcID, fmt.Sprintf("i-%02d", i), attrs))
	}
	ids, pages := listIDs(t, ctx, c, svcID)
	if len(ids) != 10 || pages != 4 {
		t.Fatalf("paged ListInstances returned %d ids in %d pages, want 10 in 4", len(ids), pages)
	}
	// ListServices filters each page after reading it: with b's services created
	// first, a's first page is empty but carries a NextToken.
	for i := range 4 {
		newService(t, ctx, c, nsB, fmt.Sprintf("b%d", i))
	}
	newService(t, ctx, c, nsA, "late")
	first, err := c.ListServices(ctx, &sd.ListServicesInput{Filters: []types.ServiceFilter{{
		Name: types.ServiceFilterNameNamespaceId, Values: []string{nsA}, Condition: types.FilterConditionEq}}})
	if err != nil {
		t.Fatal(err)
	}
	if first.NextToken == nil {
		t.Fatal("first ListServices page has no NextToken")
	}
	var names []string
	p := sd.NewListServicesPaginator(c, &sd.ListServicesInput{Filters: []types.ServiceFilter{{
		Name: types.ServiceFilterNameNamespaceId, Values: []string{nsA}, Condition: types.FilterConditionEq}}})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range out.Services {
			names = append(names, *s.Name)
		}
	}
	if strings.Join(names, ",") != "web,late" {
		t.Fatalf("services of namespace a = %v, want web,late", names)
	}
	_, err = c.ListInstances(ctx, &sd.ListInstancesInput{ServiceId: aws.String(svcID), NextToken: aws.String("garbage!")})
	var inv *types.InvalidInput
	if !errors.As(err, &inv) {
		t.Fatalf("bad NextToken: %v, want InvalidInput", err)
	}
}

func TestModeledErrors(t *testing.T) {
	_, c, ctx := setup(t, cloudmaptest.Options{PendingPolls: -1})
	nsID := newNamespace(t, ctx, c, "errs")
	svcID := newService(t, ctx, c, nsID, "web")

	_, err := c.CreateService(ctx, &sd.CreateServiceInput{Name: aws.String("web"), NamespaceId: aws.String(nsID)})
	var exists *types.ServiceAlreadyExists
	if !errors.As(err, &exists) || aws.ToString(exists.ServiceId) != svcID {
		t.Fatalf("duplicate CreateService: %v, want ServiceAlreadyExists naming %s", err, svcID)
	}
	_, err = c.CreateHttpNamespace(ctx, &sd.CreateHttpNamespaceInput{Name: aws.String("errs")})
	var nsExists *types.NamespaceAlreadyExists
	if !errors.As(err, &nsExists) || aws.ToString(nsExists.NamespaceId) != nsID {
		t.Fatalf("duplicate CreateHttpNamespace: %v, want NamespaceAlreadyExists naming %s", err, nsID)
	}
	_, err = c.DeregisterInstance(ctx, &sd.DeregisterInstanceInput{ServiceId: aws.String(svcID), InstanceId: aws.String("nope")})
	var noInst *types.InstanceNotFound
	if !errors.As(err, &noInst) {
		t.Fatalf("DeregisterInstance of a missing instance: %v, want InstanceNotFound", err)
	}
	_, err = c.ListInstances(ctx, &sd.ListInstancesInput{ServiceId: aws.String("srv-missing")})
	var noSvc *types.ServiceNotFound
	if !errors.As(err, &noSvc) {
		t.Fatalf("ListInstances of a missing service: %v, want ServiceNotFound", err)
	}
	_, err = c.GetNamespace(ctx, &sd.GetNamespaceInput{Id: aws.String("ns-missing")})
	var noNS *types.NamespaceNotFound
	if !errors.As(err, &noNS) {
		t.Fatalf("GetNamespace of a missing namespace: %v, want NamespaceNotFound", err)
	}
	for name, in := range map[string]*sd.RegisterInstanceInput{
		"long value":    {Attributes: map[string]string{"a": strings.Repeat("x", 1025)}},
		"total size":    {Attributes: map[string]string{"a": strings.Repeat("x", 1000), "b": strings.Repeat("x", 1000), "c": strings.Repeat("x", 1000), "d": strings.Repeat("x", 1000), "e": strings.Repeat("x", 1000)}},
		"ipv4":          {Attributes: map[string]string{"AWS_INSTANCE_IPV4": "2001:db8::1"}},
		"instance id":   {InstanceId: aws.String("has space"), Attributes: attrs},
		"service name":  nil,
		"missing value": {Attributes: map[string]string{"AWS_INSTANCE_PORT": "http"}},
	} {
		if in == nil {
			_, err = c.CreateService(ctx, &sd.CreateServiceInput{Name: aws.String("ends-"), NamespaceId: aws.String(nsID)})
		} else {
			in.ServiceId = aws.String(svcID)
			if in.InstanceId == nil {
				in.InstanceId = aws.String("i-1")
			}
			_, err = c.RegisterInstance(ctx, in)
		}
		var inv *types.InvalidInput
		if !errors.As(err, &inv) {
			t.Errorf("%s: %v, want InvalidInput", name, err)
		}
	}
}

func TestThrottleIsRetriedBySDK(t *testing.T) {
	s, c, ctx := setup(t, cloudmaptest.Options{})
	s.Throttle(2)
	if _, err := c.ListNamespaces(ctx, &sd.ListNamespacesInput{}); err != nil {
		t.Fatalf("ListNamespaces after two throttles: %v", err)
	}
	if n := s.Calls("ListNamespaces"); n != 3 {
		t.Fatalf("ListNamespaces reached the fake %d times, want 3 (two throttled)", n)
	}
}

func TestIdempotentRetryGetsSameOperation(t *testing.T) {
	_, c, ctx := setup(t, cloudmaptest.Options{})
	svcID := newService(t, ctx, c, newNamespace(t, ctx, c, "idem"), "web")
	in := &sd.RegisterInstanceInput{ServiceId: aws.String(svcID), InstanceId: aws.String("i-1"), CreatorRequestId: aws.String("req-1"), Attributes: attrs}
	a, err := c.RegisterInstance(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.RegisterInstance(ctx, in)
	if err != nil || *a.OperationId != *b.OperationId {
		t.Fatalf("retry with the same CreatorRequestId: %v, %v vs %v", err, aws.ToString(b.OperationId), *a.OperationId)
	}
}

func TestRejectsUnsignedAndUnknown(t *testing.T) {
	s, c, ctx := setup(t, cloudmaptest.Options{})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/", strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", "Route53AutoNaming_v20170314.ListNamespaces")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("unsigned request: status %d, want 403", resp.StatusCode)
	}
	// An operation the fake does not implement fails loudly through the SDK.
	_, err = c.ListOperations(ctx, &sd.ListOperationsInput{})
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "UnknownOperationException" {
		t.Fatalf("ListOperations: %v, want UnknownOperationException", err)
	}
}
