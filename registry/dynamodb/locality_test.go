package dynamodb

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/dynamotest"
)

// TestLocalityAttributes: region, zone and health are attributes of their own,
// omitted when empty or healthy, and read back as written.
func TestLocalityAttributes(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	full := ep("prod", "web", "http", "10.0.0.1", 80)
	full.Region, full.Zone, full.Health = "eu-west", "eu-west-1a", endpoint.Draining
	zoneOnly := ep("prod", "web", "http", "10.0.0.2", 80)
	zoneOnly.Zone, zoneOnly.Health = "b", endpoint.Unhealthy
	for _, c := range []struct {
		e    endpoint.Endpoint
		want map[string]string // "" = absent
	}{
		{full, map[string]string{attrRegion: "eu-west", attrZone: "eu-west-1a", attrHealth: "draining"}},
		{zoneOnly, map[string]string{attrRegion: "", attrZone: "b", attrHealth: "unhealthy"}},
		{ep("prod", "web", "http", "10.0.0.3", 80), map[string]string{attrRegion: "", attrZone: "", attrHealth: ""}},
	} {
		item := encode(c.e, now)
		for name, want := range c.want {
			v, ok := item[name]
			s, _ := v.(*types.AttributeValueMemberS)
			if (want == "") != !ok || (ok && (s == nil || s.Value != want)) {
				t.Errorf("%s: attribute %s = %v, want %q (empty: absent)", c.e.Key(), name, v, want)
			}
		}
		got, _, err := decode(item)
		if err != nil || !endpoint.Equal(got, c.e) {
			t.Errorf("decode(encode(%+v)) = %+v, %v", c.e, got, err)
		}
	}
}

// TestHealthReadLiberally: an item without health is healthy (every item written
// before the field existed), and a state this release does not know, or a value that
// is not a string, is unhealthy rather than unreadable.
func TestHealthReadLiberally(t *testing.T) {
	for _, c := range []struct {
		v    types.AttributeValue
		want endpoint.Health
	}{
		{nil, endpoint.Healthy},
		{str(""), endpoint.Healthy},
		{str("healthy"), endpoint.Healthy},
		{str("DRAINING"), endpoint.Draining},
		{str("unhealthy"), endpoint.Unhealthy},
		{str("quarantined"), endpoint.Unhealthy},
		{num(2), endpoint.Unhealthy},
	} {
		item := encode(ep("prod", "web", "http", "10.0.0.1", 80), time.Now())
		if c.v != nil {
			item[attrHealth] = c.v
		}
		got, _, err := decode(item)
		if err != nil || got.Health != c.want {
			t.Errorf("health attribute %v: decoded %v, %v; want %v", c.v, got.Health, err, c.want)
		}
	}
}

// TestLocalityStored goes through the local DynamoDB: the attributes are stored, a
// health change replaces the item whole (back to healthy drops the attribute), and an
// item another writer stored with an unknown state lists as unhealthy.
func TestLocalityStored(t *testing.T) {
	srv := dynamotest.Start(t)
	r := openTest(t, srv)
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	a.Region, a.Zone, a.Health = "eu-west", "eu-west-1a", endpoint.Draining
	register(t, r, a)
	item := getItem(t, srv, r.table, a.Key())
	if s, ok := item[attrHealth].(*types.AttributeValueMemberS); !ok || s.Value != "draining" {
		t.Fatalf("stored health = %v, want draining", item[attrHealth])
	}
	expectListed(t, r, a)

	a.Health = endpoint.Healthy
	register(t, r, a)
	if v, ok := getItem(t, srv, r.table, a.Key())[attrHealth]; ok {
		t.Errorf("a healthy item still has health %v", v)
	}
	expectListed(t, r, a)

	item = getItem(t, srv, r.table, a.Key())
	item[attrHealth] = str("quarantined")
	if _, err := rawClient(t, srv).PutItem(testCtx(t), &dynamodb.PutItemInput{TableName: aws.String(r.table), Item: item}); err != nil {
		t.Fatal(err)
	}
	a.Health = endpoint.Unhealthy
	expectListed(t, r, a)
}

func expectListed(t *testing.T, r reg, want ...endpoint.Endpoint) {
	t.Helper()
	got, err := r.List(testCtx(t), endpoint.Filter{Service: "web"})
	if err != nil || len(got) != len(want) {
		t.Fatalf("List = %+v, %v; want %+v", got, err, want)
	}
	for i := range want {
		if !endpoint.Equal(got[i], want[i]) {
			t.Errorf("List[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
}
