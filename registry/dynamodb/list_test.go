package dynamodb

import (
	"fmt"
	"slices"
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

// tricky endpoints: prefixes of one another ("east"/"eastern", "10.0.0.1"/"10.0.0.10",
// "http"/"https"), so a begins_with without its trailing separator would leak.
func tricky() []endpoint.Endpoint {
	return []endpoint.Endpoint{
		ep("east", "web", "http", "10.0.0.1", 80),
		ep("east", "web", "http", "10.0.0.10", 80),
		ep("east", "web", "https", "10.0.0.1", 443),
		ep("east", "web", "grpc", "10.0.0.1", 9090),
		ep("eastern", "web", "http", "10.0.0.1", 80),
		ep("west", "web", "http", "2001:db8::1", 80),
		ep("east", "webhook", "http", "10.0.0.2", 80),
		ep("east", "db", "tcp", "10.0.0.3", 5432),
		ep("west", "db", "tcp", "10.0.0.3", 5432),
	}
}

func register(t testing.TB, r registry.Registry, eps ...endpoint.Endpoint) {
	t.Helper()
	ops := make([]registry.Op, len(eps))
	for i, e := range eps {
		ops[i] = registry.Register(e)
	}
	if err := r.Apply(testCtx(t), ops); err != nil {
		t.Fatalf("Apply: %v", err)
	}
}

// TestFilterAccessPaths proves which filters are served by a Query (and on which
// index) rather than a Scan, and that each returns exactly what Filter.Match selects.
func TestFilterAccessPaths(t *testing.T) {
	srv := dynamotest.Start(t)
	r := openTest(t, srv)
	all := tricky()
	register(t, r, all...)
	cases := []struct {
		f     endpoint.Filter
		op    string
		index string
	}{
		{endpoint.Filter{Service: "web"}, "Query", ""},
		{endpoint.Filter{Service: "web", Cluster: "east"}, "Query", ""},
		{endpoint.Filter{Service: "web", Cluster: "east", Protocol: "http"}, "Query", ""},
		{endpoint.Filter{Service: "web", Cluster: "east", Protocol: "http", Address: "10.0.0.1"}, "Query", ""},
		{endpoint.Filter{Service: "web", Protocol: "http"}, "Query", ""},
		{endpoint.Filter{Service: "web", Address: "2001:DB8::1"}, "Query", ""},
		{endpoint.Filter{Service: "web", Cluster: "*", Protocol: "https"}, "Query", ""},
		{endpoint.Filter{Cluster: "east"}, "Query", clusterIndex},
		{endpoint.Filter{Cluster: "east", Protocol: "http"}, "Query", clusterIndex},
		{endpoint.Filter{Cluster: "east", Protocol: "http", Address: "10.0.0.1"}, "Query", clusterIndex},
		{endpoint.Filter{Cluster: "west", Address: "10.0.0.3"}, "Query", clusterIndex},
		{endpoint.Filter{}, "Scan", ""},
		{endpoint.Filter{Protocol: "tcp"}, "Scan", ""},
		{endpoint.Filter{Address: "10.0.0.1"}, "Scan", ""},
	}
	for _, c := range cases {
		srv.ResetRequests()
		got, err := r.List(testCtx(t), c.f)
		if err != nil {
			t.Fatalf("List(%+v): %v", c.f, err)
		}
		reqs := srv.Requests()
		if len(reqs) != 1 || reqs[0].Op != c.op || reqs[0].Index != c.index {
			t.Errorf("List(%+v) sent %+v, want one %s on index %q", c.f, reqs, c.op, c.index)
		}
		var want []endpoint.Endpoint
		for _, e := range all {
			if c.f.Match(e) {
				want = append(want, e)
			}
		}
		endpoint.Sort(want)
		if !slices.Equal(keysOf(got), keysOf(want)) {
			t.Errorf("List(%+v) = %v, want %v", c.f, keysOf(got), keysOf(want))
		}
		// List re-checks on the client; the server alone must already be exact.
		raw, err := r.fetch(testCtx(t), r.plan(c.f.Normalize(), time.Now().UnixMilli()))
		if err != nil || len(raw) != len(want) {
			t.Errorf("the server returned %d items for %+v (%v), want %d", len(raw), c.f, err, len(want))
		}
	}
}

// TestPlanNarrowsByPrefix checks the key conditions: leading fields of the sort key
// go into begins_with, with the trailing separator; the others become filters.
func TestPlanNarrowsByPrefix(t *testing.T) {
	r := &driver{clusterIndex: true}
	cases := []struct {
		f       endpoint.Filter
		keyCond string
		prefix  string // value of the begins_with operand, if any
		filters []string
	}{
		{endpoint.Filter{Service: "web"}, "#pk = :pk", "", nil},
		{endpoint.Filter{Service: "web", Cluster: "east"}, "#pk = :pk AND begins_with(#sk, :sk)", "east#", nil},
		{endpoint.Filter{Service: "web", Cluster: "east", Protocol: "http", Address: "10.0.0.1"},
			"#pk = :pk AND begins_with(#sk, :sk)", "east#http#10.0.0.1#", nil},
		{endpoint.Filter{Service: "web", Cluster: "east", Address: "10.0.0.1"},
			"#pk = :pk AND begins_with(#sk, :sk)", "east#", []string{"#address = :address"}},
		{endpoint.Filter{Service: "web", Protocol: "http"}, "#pk = :pk", "", []string{"#protocol = :protocol"}},
		{endpoint.Filter{Cluster: "east", Protocol: "grpc"}, "#cluster = :cluster AND begins_with(#csk, :csk)", "grpc#", nil},
		{endpoint.Filter{Protocol: "grpc"}, "", "", []string{"#protocol = :protocol"}},
	}
	for _, c := range cases {
		p := r.plan(c.f, 1)
		if p.keyCond != c.keyCond {
			t.Errorf("plan(%+v) key condition %q, want %q", c.f, p.keyCond, c.keyCond)
		}
		if c.prefix != "" {
			op := ":sk"
			if p.index != "" {
				op = ":csk"
			}
			if v, _ := p.values[op].(*types.AttributeValueMemberS); v == nil || v.Value != c.prefix {
				t.Errorf("plan(%+v) prefix %v, want %q", c.f, p.values[op], c.prefix)
			}
		}
		wantFilters := append(c.filters, "(attribute_not_exists(#exp) OR #exp > :now)")
		if !slices.Equal(p.filters, wantFilters) {
			t.Errorf("plan(%+v) filters %q, want %q", c.f, p.filters, wantFilters)
		}
	}
}

// TestListPaginates follows LastEvaluatedKey across pages of Query and Scan.
func TestListPaginates(t *testing.T) {
	srv := dynamotest.Start(t)
	r := openTest(t, srv, func(c *Config) { c.PageSize = 3 })
	var eps []endpoint.Endpoint
	for i := range 10 {
		eps = append(eps, ep("prod", "web", "http", fmt.Sprintf("10.0.0.%d", i+1), 80))
	}
	register(t, r, eps...)
	for _, c := range []struct {
		f  endpoint.Filter
		op string
	}{{endpoint.Filter{Service: "web"}, "Query"}, {endpoint.Filter{}, "Scan"}, {endpoint.Filter{Cluster: "prod"}, "Query"}} {
		srv.ResetRequests()
		got, err := r.List(testCtx(t), c.f)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(eps) {
			t.Errorf("List(%+v) over pages of 3 returned %d endpoints, want %d", c.f, len(got), len(eps))
		}
		if n := srv.Count(c.op); n < 4 {
			t.Errorf("List(%+v) sent %d %s requests, want at least 4 pages of 3", c.f, n, c.op)
		}
	}
}

// TestClusterFilterWithoutIndex: a table created without the GSI still answers
// cluster filters, by Scan.
func TestClusterFilterWithoutIndex(t *testing.T) {
	srv := dynamotest.Start(t)
	raw := rawClient(t, srv)
	table := newTableName()
	_, err := raw.CreateTable(testCtx(t), &dynamodb.CreateTableInput{
		TableName: aws.String(table), BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String("sk"), AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String("sk"), KeyType: types.KeyTypeRange},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := openTest(t, srv, func(c *Config) { c.Table, c.CreateTable = table, false })
	all := tricky()
	register(t, r, all...)
	srv.ResetRequests()
	got, err := r.List(testCtx(t), endpoint.Filter{Cluster: "west"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || srv.Count("Scan") != 1 || srv.Count("Query") != 0 {
		t.Errorf("List(cluster west) without the GSI = %v via %+v, want 2 endpoints via one Scan", keysOf(got), srv.Requests())
	}
}

// TestExpiredItemsHidden: DynamoDB deletes expired items lazily, so they are still in
// the table; reads must not return them, and the server-side filter drops them
// before they cross the network.
func TestExpiredItemsHidden(t *testing.T) {
	srv := dynamotest.Start(t)
	r := openTest(t, srv)
	base := time.Now()
	r.now = func() time.Time { return base }
	short := ep("prod", "web", "http", "10.0.0.1", 80)
	short.TTL = endpoint.TTL(30 * time.Second)
	never := ep("prod", "web", "http", "10.0.0.2", 80)
	never.TTL = endpoint.Never
	unset := ep("prod", "web", "http", "10.0.0.3", 80)
	register(t, r, short, never, unset)

	// The expiry attributes: milliseconds for readers, whole seconds rounded up for
	// DynamoDB's TTL.
	item := getItem(t, srv, r.table, short.Key())
	wantMs := base.Add(30 * time.Second).UnixMilli()
	if got := attrString(item, attrExpiresMs); got != fmt.Sprint(wantMs) {
		t.Errorf("expires_ms = %s, want %d", got, wantMs)
	}
	if got := attrString(item, attrExpiresAt); got != fmt.Sprint((wantMs+999)/1000) {
		t.Errorf("expires_at = %s, want %d (rounded up)", got, (wantMs+999)/1000)
	}
	for _, e := range []endpoint.Endpoint{never, unset} {
		if item := getItem(t, srv, r.table, e.Key()); item[attrExpiresAt] != nil || item[attrExpiresMs] != nil {
			t.Errorf("endpoint with TTL %q has expiry attributes", e.TTL)
		}
	}

	for _, f := range []endpoint.Filter{{}, {Service: "web"}, {Cluster: "prod"}} {
		r.now = func() time.Time { return base.Add(29 * time.Second) }
		if got, _ := r.List(testCtx(t), f); len(got) != 3 {
			t.Errorf("List(%+v) before expiry returned %d endpoints, want 3", f, len(got))
		}
		r.now = func() time.Time { return base.Add(31 * time.Second) }
		got, err := r.List(testCtx(t), f)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(keysOf(got), keysOf([]endpoint.Endpoint{never, unset})) {
			t.Errorf("List(%+v) after expiry = %v, want the two without a TTL", f, keysOf(got))
		}
		raw, err := r.fetch(testCtx(t), r.plan(f.Normalize(), r.now().UnixMilli()))
		if err != nil || len(raw) != 2 {
			t.Errorf("the server returned %d items for %+v (%v), want 2: the expired one must be filtered there", len(raw), f, err)
		}
	}
	if item := getItem(t, srv, r.table, short.Key()); item == nil {
		t.Error("the expired item is gone from the table; this test needs it present, as DynamoDB leaves it")
	}
}

func getItem(t testing.TB, srv *dynamotest.Server, table string, k endpoint.Key) map[string]types.AttributeValue {
	t.Helper()
	out, err := rawClient(t, srv).GetItem(testCtx(t), &dynamodb.GetItemInput{TableName: aws.String(table), Key: itemKey(k)})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

// TestForeignItemsSkipped: an item that is not an endpoint does not fail the list.
func TestForeignItemsSkipped(t *testing.T) {
	srv := dynamotest.Start(t)
	r := openTest(t, srv)
	good := ep("prod", "web", "http", "10.0.0.1", 80)
	register(t, r, good)
	bad := []map[string]types.AttributeValue{
		{attrPK: str("web"), attrSK: str("junk")},
		{attrPK: str("web"), attrSK: str("bad-port"), attrCluster: str("prod"), attrService: str("web"), attrProtocol: str("http"),
			attrAddress: str("10.0.0.9"), attrPort: str("80"), attrPriority: num(1)},
		{attrPK: str("web"), attrSK: str("bad-address"), attrCluster: str("prod"), attrService: str("web"), attrProtocol: str("http"),
			attrAddress: str("10.0.0.300"), attrPort: num(80), attrPriority: num(1)},
	}
	raw := rawClient(t, srv)
	for _, item := range bad {
		if _, err := raw.PutItem(testCtx(t), &dynamodb.PutItemInput{TableName: aws.String(r.table), Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := r.List(testCtx(t), endpoint.Filter{Service: "web"})
	if err != nil || len(got) != 1 || !endpoint.Equal(got[0], good) {
		t.Fatalf("List with foreign items = %v, %v; want only %v", got, err, good.Key())
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	now := time.Unix(1_700_000_000, 123_000_000)
	for _, e := range []endpoint.Endpoint{
		ep("c", "s", "p", "10.0.0.1", 0),
		{Cluster: "prod-eu", Service: "api_gw", Protocol: "grpc", Address: "2001:db8::7", Port: 65535,
			Node: "node-7.example", Priority: 255, Weight: 65535, TTL: endpoint.TTL(90 * time.Second),
			Annotations: map[string]string{"empty": "", "prometheus.io/scrape": "true", "note": "ünïcode # and spaces"}},
		{Cluster: "c", Service: "s", Protocol: "p", Address: "::1", Port: 1, Priority: 3, TTL: endpoint.Never},
	} {
		got, exp, err := decode(encode(e, now))
		if err != nil {
			t.Fatalf("decode(encode(%+v)): %v", e, err)
		}
		if !endpoint.Equal(got, e) {
			t.Errorf("round trip changed the endpoint:\n got %+v\nwant %+v", got, e)
		}
		if d := e.TTL.Duration(); (d > 0) != (exp != 0) || (d > 0 && exp != now.Add(d).UnixMilli()) {
			t.Errorf("expiry of %+v = %d", e, exp)
		}
		if strings.Contains(sortKey(e.Key()), "##") {
			t.Errorf("sort key %q has an empty part", sortKey(e.Key()))
		}
	}
}

// FuzzDecode feeds decode arbitrary attribute values: it must never panic, and what
// it accepts must be a valid endpoint that encodes back to an equal one.
func FuzzDecode(f *testing.F) {
	f.Add("prod", "web", "http", "10.0.0.1", "80", "1", "", "", "30s", "", "")
	f.Add("c", "s", "p", "2001:db8::1", "65535", "255", "65535", "n", "never", "1700000000000", "")
	f.Add("", "9x", "p", "10.0.0.300", "-1", "0", "x", "", "10ms", "abc", "")
	f.Add("prod", "web", "http", "10.0.0.1", "80", "1", "", "", "30s", "", "dynamodb-hold-00ff.1")
	f.Fuzz(func(t *testing.T, cluster, service, protocol, address, port, priority, weight, node, ttl, exp, owner string) {
		item := map[string]types.AttributeValue{
			attrCluster: str(cluster), attrService: str(service), attrProtocol: str(protocol), attrAddress: str(address),
			attrPort: &types.AttributeValueMemberN{Value: port}, attrPriority: &types.AttributeValueMemberN{Value: priority},
		}
		for name, v := range map[string]string{attrWeight: weight, attrExpiresMs: exp} {
			if v != "" {
				item[name] = &types.AttributeValueMemberN{Value: v}
			}
		}
		for name, v := range map[string]string{attrNode: node, attrTTL: ttl, attrOwner: owner} {
			if v != "" {
				item[name] = str(v)
			}
		}
		e, _, err := decode(item)
		if err != nil {
			return
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("decode accepted an invalid endpoint %+v: %v", e, err)
		}
		again, _, err := decode(encode(e, time.Now()))
		if err != nil || !endpoint.Equal(again, e) {
			t.Fatalf("re-encoding %+v gave %+v, %v", e, again, err)
		}
		got, err := decodeOwner(item)
		if err != nil || got == "" {
			return
		}
		held := encodeHeld(e, got, time.Now())
		again, heldExp, err := decode(held)
		if back, oerr := decodeOwner(held); err != nil || oerr != nil || back != got || heldExp != 0 || !endpoint.Equal(again, e) {
			t.Fatalf("re-encoding %+v held by %q gave %+v, owner %q, expiry %d, %v, %v", e, got, again, back, heldExp, err, oerr)
		}
	})
}

// FuzzDecodeHeartbeat: what decodeHeartbeat accepts encodes back to the same owner
// and expiry, and it never panics.
func FuzzDecodeHeartbeat(f *testing.F) {
	f.Add("dynamodb-hold-00ff.1", "1700000000000")
	f.Add("", "x")
	f.Add("o", " 12 ")
	f.Fuzz(func(t *testing.T, sk, exp string) {
		item := map[string]types.AttributeValue{attrPK: str(heartbeatPK), attrSK: str(sk),
			attrExpiresMs: &types.AttributeValueMemberN{Value: exp}}
		owner, ms, err := decodeHeartbeat(item)
		if err != nil {
			return
		}
		o2, ms2, err := decodeHeartbeat(encodeHeartbeat(owner, ms))
		if err != nil || o2 != owner || ms2 != ms || !isHeartbeat(item) {
			t.Fatalf("heartbeat (%q, %d) re-encoded as (%q, %d), %v", owner, ms, o2, ms2, err)
		}
	})
}
