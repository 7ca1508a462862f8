package dynamodb

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"go.uber.org/goleak"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/dynamotest"
	"github.com/switchboard-mesh/switchboard/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var tableSeq atomic.Int64

func newTableName() string { return fmt.Sprintf("endpoints-%d", tableSeq.Add(1)) }

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// testConfig points a fresh table on srv; MaxBackoff is small so retry tests are quick.
func testConfig(srv *dynamotest.Server) Config {
	return Config{
		Table:       newTableName(),
		Region:      dynamotest.Region,
		Endpoint:    srv.URL,
		CreateTable: true,
		Credentials: credentials.NewStaticCredentialsProvider(dynamotest.AccessKeyID, dynamotest.SecretAccessKey, ""),
		MaxBackoff:  2 * time.Millisecond,
	}
}

func openTest(t testing.TB, srv *dynamotest.Server, tweak ...func(*Config)) reg {
	t.Helper()
	cfg := testConfig(srv)
	for _, f := range tweak {
		f(&cfg)
	}
	r, err := Open(testCtx(t), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return reg{Front: r, driver: r.Driver().(*driver)}
}

// reg is a registry on the test server: the front the tests call, and its driver
// for what they look at behind it.
type reg struct {
	*registry.Front
	*driver
}

func (r reg) Apply(ctx context.Context, ops []registry.Op) error { return r.Front.Apply(ctx, ops) }
func (r reg) List(ctx context.Context, f endpoint.Filter) ([]endpoint.Endpoint, error) {
	return r.Front.List(ctx, f)
}
func (r reg) Close() error { return r.Front.Close() }

// rawClient talks to srv directly, for setting up tables and items the backend
// would not write.
func rawClient(t testing.TB, srv *dynamotest.Server) *dynamodb.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return dynamodb.New(dynamodb.Options{
		Region:       dynamotest.Region,
		BaseEndpoint: aws.String(srv.URL),
		Credentials:  credentials.NewStaticCredentialsProvider(dynamotest.AccessKeyID, dynamotest.SecretAccessKey, ""),
		HTTPClient:   &http.Client{Transport: tr},
	})
}

func ep(cluster, service, protocol, address string, port int) endpoint.Endpoint {
	return endpoint.Endpoint{Cluster: cluster, Service: service, Protocol: protocol, Address: address, Port: port, Priority: 1}
}

func keysOf(eps []endpoint.Endpoint) []endpoint.Key {
	out := make([]endpoint.Key, len(eps))
	for i, e := range eps {
		out[i] = e.Key()
	}
	return out
}
