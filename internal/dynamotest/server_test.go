package dynamotest

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func client(t *testing.T, s *Server) *dynamodb.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return dynamodb.New(dynamodb.Options{
		Region: Region, BaseEndpoint: aws.String(s.URL), RetryMaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider(AccessKeyID, SecretAccessKey, ""),
		HTTPClient:  &http.Client{Transport: tr},
	})
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func createTable(t *testing.T, c *dynamodb.Client, name string) {
	t.Helper()
	_, err := c.CreateTable(ctx(t), &dynamodb.CreateTableInput{
		TableName: aws.String(name), BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	})
	if err != nil {
		t.Fatal(err)
	}
}

func puts(table string, n int) []types.TransactWriteItem {
	items := make([]types.TransactWriteItem, n)
	for i := range items {
		items[i].Put = &types.Put{TableName: aws.String(table),
			Item: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: strconv.Itoa(i)}}}
	}
	return items
}

func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func TestTransactItemLimit(t *testing.T) {
	s := Start(t)
	c := client(t, s)
	createTable(t, c, "t")
	if _, err := c.TransactWriteItems(ctx(t), &dynamodb.TransactWriteItemsInput{TransactItems: puts("t", 101)}); errorCode(err) != "ValidationException" {
		t.Errorf("101 transaction items: %v, want a ValidationException as DynamoDB sends", err)
	}
	if _, err := c.TransactWriteItems(ctx(t), &dynamodb.TransactWriteItemsInput{TransactItems: puts("t", 100)}); err != nil {
		t.Errorf("100 transaction items: %v", err)
	}
	if got := s.Requests(); len(got) != 3 || got[1].Items != 101 || got[2].Op != "TransactWriteItems" || got[2].Table != "" {
		t.Errorf("requests recorded as %+v", got)
	}
}

func TestResponsesCarryCRC32(t *testing.T) {
	s := Start(t)
	req, _ := http.NewRequest(http.MethodPost, s.URL, strings.NewReader(`{"TableName":"missing"}`))
	req.Header.Set("X-Amz-Target", "DynamoDB_20120810.DescribeTable")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if want := strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10); resp.Header.Get("X-Amz-Crc32") != want {
		t.Errorf("X-Amz-Crc32 = %q, want %s", resp.Header.Get("X-Amz-Crc32"), want)
	}
	http.DefaultClient.CloseIdleConnections()
}

func TestTimeToLive(t *testing.T) {
	s := Start(t)
	c := client(t, s)
	spec := &types.TimeToLiveSpecification{AttributeName: aws.String("exp"), Enabled: aws.Bool(true)}
	if _, err := c.UpdateTimeToLive(ctx(t), &dynamodb.UpdateTimeToLiveInput{TableName: aws.String("t"), TimeToLiveSpecification: spec}); errorCode(err) != "ResourceNotFoundException" {
		t.Errorf("UpdateTimeToLive on a missing table: %v", err)
	}
	createTable(t, c, "t")
	if _, err := c.UpdateTimeToLive(ctx(t), &dynamodb.UpdateTimeToLiveInput{TableName: aws.String("t"), TimeToLiveSpecification: spec}); err != nil {
		t.Fatal(err)
	}
	out, err := c.DescribeTimeToLive(ctx(t), &dynamodb.DescribeTimeToLiveInput{TableName: aws.String("t")})
	if err != nil || out.TimeToLiveDescription.TimeToLiveStatus != types.TimeToLiveStatusEnabled || s.TTLAttribute("t") != "exp" {
		t.Errorf("DescribeTimeToLive = %+v, %v; recorded %q", out, err, s.TTLAttribute("t"))
	}
}

func TestFaults(t *testing.T) {
	s := Start(t)
	c := client(t, s)
	createTable(t, c, "t")
	key := map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "1"}}
	s.Fail("GetItem", 1, Pass())
	s.Fail("GetItem", 1, Throttling())
	for i, want := range []string{"", "ProvisionedThroughputExceededException", ""} {
		_, err := c.GetItem(ctx(t), &dynamodb.GetItemInput{TableName: aws.String("t"), Key: key})
		if errorCode(err) != want || (want == "" && err != nil) {
			t.Errorf("GetItem %d: %v, want code %q", i, err, want)
		}
	}
	s.Fail("TransactWriteItems", 1, TransactionCanceled("None", "TransactionConflict"))
	_, err := c.TransactWriteItems(ctx(t), &dynamodb.TransactWriteItemsInput{TransactItems: puts("t", 2)})
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) || len(tce.CancellationReasons) != 2 || aws.ToString(tce.CancellationReasons[1].Code) != "TransactionConflict" {
		t.Errorf("cancelled transaction: %v", err)
	}
	s.DescribeTableStatus("CREATING")
	for _, want := range []types.TableStatus{"CREATING", ""} {
		out, err := c.DescribeTable(ctx(t), &dynamodb.DescribeTableInput{TableName: aws.String("t")})
		if err != nil || out.Table.TableStatus != want {
			t.Errorf("DescribeTable status %q (%v), want %q", out.Table.TableStatus, err, want)
		}
	}
	if s.Count("GetItem") != 3 {
		t.Errorf("GetItem counted %d times, want 3", s.Count("GetItem"))
	}
}

// TestAdminSerialised creates tables while another is being written and queried;
// under -race this fails if the wrapper lets minidyn's unlocked CreateTable overlap.
func TestAdminSerialised(t *testing.T) {
	s := Start(t)
	c := client(t, s)
	createTable(t, c, "busy")
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 10 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, err := c.CreateTable(ctx(t), &dynamodb.CreateTableInput{
				TableName: aws.String(fmt.Sprintf("t%d", i)), BillingMode: types.BillingModePayPerRequest,
				AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
				KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
			})
			errs <- err
		}()
		go func() {
			defer wg.Done()
			_, err := c.TransactWriteItems(ctx(t), &dynamodb.TransactWriteItemsInput{TransactItems: puts("busy", 3)})
			if err == nil {
				_, err = c.Scan(ctx(t), &dynamodb.ScanInput{TableName: aws.String("busy")})
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}
