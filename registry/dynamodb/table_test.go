package dynamodb

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/dynamotest"
	"github.com/switchboard-mesh/switchboard/registry"
)

// TestCreateTable: the created table has the documented keys, the cluster GSI and
// TTL on expires_at; opening it again (creating or not) works.
func TestCreateTable(t *testing.T) {
	srv := dynamotest.Start(t)
	r := openTest(t, srv)
	out, err := rawClient(t, srv).DescribeTable(testCtx(t), &dynamodb.DescribeTableInput{TableName: aws.String(r.table)})
	if err != nil {
		t.Fatal(err)
	}
	if err := checkKeySchema(out.Table.KeySchema); err != nil {
		t.Error(err)
	}
	if !hasClusterIndex(out.Table) || !r.clusterIndex {
		t.Errorf("table has GSIs %+v, want %s in use", out.Table.GlobalSecondaryIndexes, clusterIndex)
	}
	if got := srv.TTLAttribute(r.table); got != attrExpiresAt {
		t.Errorf("TTL enabled on %q, want %q", got, attrExpiresAt)
	}
	for _, create := range []bool{true, false} {
		again := openTest(t, srv, func(c *Config) { c.Table, c.CreateTable = r.table, create })
		if !again.clusterIndex {
			t.Errorf("reopening (create=%v) did not find the GSI", create)
		}
	}
	if n := srv.Count("UpdateTimeToLive"); n != 1 {
		t.Errorf("UpdateTimeToLive sent %d times, want once: TTL was already on when reopened", n)
	}
}

// TestCreateTableWaitsForActive polls DescribeTable through CREATING.
func TestCreateTableWaitsForActive(t *testing.T) {
	srv := dynamotest.Start(t)
	srv.DescribeTableStatus("CREATING", "CREATING", "ACTIVE")
	r := openTest(t, srv)
	// One DescribeTable found no table; then three while waiting.
	if n := srv.Count("DescribeTable"); n != 4 {
		t.Errorf("DescribeTable sent %d times, want 4", n)
	}
	register(t, r, ep("prod", "web", "http", "10.0.0.1", 80))
}

func TestCreateTableBadStatus(t *testing.T) {
	srv := dynamotest.Start(t)
	srv.DescribeTableStatus("DELETING")
	_, err := Open(testCtx(t), testConfig(srv))
	if err == nil || !strings.Contains(err.Error(), "DELETING") {
		t.Fatalf("Open of a table being deleted = %v, want an error naming its status", err)
	}
}

func TestOpenRejectsWrongKeySchema(t *testing.T) {
	srv := dynamotest.Start(t)
	table := newTableName()
	_, err := rawClient(t, srv).CreateTable(testCtx(t), &dynamodb.CreateTableInput{
		TableName: aws.String(table), BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(srv)
	cfg.Table = table
	_, err = Open(testCtx(t), cfg)
	if err == nil || !strings.Contains(err.Error(), "key schema") || !strings.Contains(err.Error(), table) {
		t.Fatalf("Open of a table keyed on id = %v, want an error naming the table and its key schema", err)
	}
}

func TestOpenMissingTable(t *testing.T) {
	srv := dynamotest.Start(t)
	cfg := testConfig(srv)
	cfg.CreateTable = false
	_, err := Open(testCtx(t), cfg)
	if err == nil || !strings.Contains(err.Error(), cfg.Table) || !strings.Contains(err.Error(), "--"+ParamCreateTable) {
		t.Fatalf("Open of a missing table = %v, want an error naming it and the flag", err)
	}
	if srv.Count("CreateTable") != 0 {
		t.Error("the table was created without dynamodb-create-table")
	}
}

// TestCloseCancelsCalls: Close ends a call stuck on the network, which then
// reports ErrClosed; later calls fail with ErrClosed at once.
func TestCloseCancelsCalls(t *testing.T) {
	srv := dynamotest.Start(t)
	r := openTest(t, srv)
	srv.Fail("Query", 1, dynamotest.Hang())
	errc := make(chan error, 1)
	go func() {
		_, err := r.List(context.Background(), endpoint.Filter{Service: "web"})
		errc <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for srv.Count("Query") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the List never reached the server")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, registry.ErrClosed) {
			t.Errorf("List cut short by Close = %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("List still running after Close returned")
	}
	if err := r.Apply(testCtx(t), registerOps(bulk(1))); !errors.Is(err, registry.ErrClosed) {
		t.Errorf("Apply after Close = %v, want ErrClosed", err)
	}
}
