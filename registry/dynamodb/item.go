package dynamodb

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// Attribute names of the schema in doc.go.
const (
	attrPK          = "pk"
	attrSK          = "sk"
	attrCluster     = "cluster"
	attrCSK         = "csk"
	attrService     = "service"
	attrProtocol    = "protocol"
	attrAddress     = "address"
	attrPort        = "port"
	attrNode        = "node"
	attrPriority    = "priority"
	attrWeight      = "weight"
	attrAnnotations = "annotations"
	attrTTL         = "ttl"
	attrRegion      = "region"
	attrZone        = "zone"
	attrHealth      = "health"
	attrExpiresAt   = "expires_at"
	attrExpiresMs   = "expires_ms"
	attrOwner       = "owner"

	clusterIndex = "cluster-index"
	sep          = "#"

	// heartbeatPK is the partition of the holds' heartbeat items. Service names never
	// contain '#', so it is never an endpoint's partition, and its items have no
	// cluster attribute, so they are not in the cluster index either.
	heartbeatPK = sep + "hold"
)

func sortKey(k endpoint.Key) string {
	return k.Cluster + sep + k.Protocol + sep + k.Address + sep + strconv.Itoa(k.Port)
}

func clusterSortKey(k endpoint.Key) string {
	return k.Protocol + sep + k.Service + sep + k.Address + sep + strconv.Itoa(k.Port)
}

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// itemKey is the primary key of k's item.
func itemKey(k endpoint.Key) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: str(k.Service), attrSK: str(sortKey(k))}
}

// encode returns e's item, with its expiry computed from now.
func encode(e endpoint.Endpoint, now time.Time) map[string]types.AttributeValue {
	k := e.Key()
	item := itemKey(k)
	item[attrCluster] = str(k.Cluster)
	item[attrCSK] = str(clusterSortKey(k))
	item[attrService] = str(k.Service)
	item[attrProtocol] = str(k.Protocol)
	item[attrAddress] = str(k.Address)
	item[attrPort] = num(int64(k.Port))
	item[attrPriority] = num(int64(e.Priority))
	item[attrWeight] = num(int64(e.Weight))
	if e.Node != "" {
		item[attrNode] = str(e.Node)
	}
	if len(e.Annotations) > 0 {
		m := make(map[string]types.AttributeValue, len(e.Annotations))
		for k, v := range e.Annotations {
			m[k] = str(v)
		}
		item[attrAnnotations] = &types.AttributeValueMemberM{Value: m}
	}
	if e.TTL.IsSet() {
		item[attrTTL] = str(e.TTL.String())
	}
	encodeLocality(item, e)
	if d := e.TTL.Duration(); d > 0 {
		ms := now.Add(d).UnixMilli()
		item[attrExpiresMs] = num(ms)
		// Rounded up: DynamoDB may delete an item once its second has passed, which
		// must not be before readers stop seeing it.
		item[attrExpiresAt] = num((ms + 999) / 1000)
	}
	return item
}

// encodeHeld returns e's item under a hold: it names its owner and has no expiry of
// its own (its TTL stays, as a value, so the endpoint reads back as registered).
func encodeHeld(e endpoint.Endpoint, owner string, now time.Time) map[string]types.AttributeValue {
	item := encode(e, now)
	delete(item, attrExpiresMs)
	delete(item, attrExpiresAt)
	item[attrOwner] = str(owner)
	return item
}

func heartbeatKey(owner string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: str(heartbeatPK), attrSK: str(owner)}
}

// encodeHeartbeat returns the heartbeat item of one hold incarnation, expiring at
// expMs for readers and, rounded up, for DynamoDB's TTL deletion.
func encodeHeartbeat(owner string, expMs int64) map[string]types.AttributeValue {
	item := heartbeatKey(owner)
	item[attrExpiresMs] = num(expMs)
	item[attrExpiresAt] = num((expMs + 999) / 1000)
	return item
}

// isHeartbeat reports whether item is a hold's heartbeat, which readers skip.
func isHeartbeat(item map[string]types.AttributeValue) bool {
	pk, ok := item[attrPK].(*types.AttributeValueMemberS)
	return ok && pk.Value == heartbeatPK
}

// decodeHeartbeat returns the owner a heartbeat item stands for and its expiry in
// epoch milliseconds.
func decodeHeartbeat(item map[string]types.AttributeValue) (string, int64, error) {
	var d decoder
	owner := d.str(item, attrSK, true)
	exp := d.num(item, attrExpiresMs, true)
	if d.err == nil && owner == "" {
		d.err = fmt.Errorf("attribute %s: empty", attrSK)
	}
	return owner, exp, d.err
}

// decodeOwner returns the hold incarnation an entry is held by, "" for an entry that
// lives by its own expiry.
func decodeOwner(item map[string]types.AttributeValue) (string, error) {
	var d decoder
	owner := d.str(item, attrOwner, false)
	if d.err == nil && owner == "" {
		if _, ok := item[attrOwner]; ok {
			d.err = fmt.Errorf("attribute %s: empty", attrOwner)
		}
	}
	return owner, d.err
}

// decode turns an item back into an endpoint and reports its expiry in epoch
// milliseconds (0: none). The endpoint is validated by the read rules: items come
// from whatever wrote to the table.
func decode(item map[string]types.AttributeValue) (endpoint.Endpoint, int64, error) {
	var (
		d   decoder
		e   endpoint.Endpoint
		exp int64
	)
	e.Cluster = d.str(item, attrCluster, true)
	e.Service = d.str(item, attrService, true)
	e.Protocol = d.str(item, attrProtocol, true)
	e.Address = d.str(item, attrAddress, true)
	e.Port = int(d.num(item, attrPort, true))
	e.Priority = int(d.num(item, attrPriority, true))
	e.Weight = int(d.num(item, attrWeight, false))
	e.Node = d.str(item, attrNode, false)
	e.Annotations = d.strMap(item, attrAnnotations)
	e.Region = d.str(item, attrRegion, false)
	e.Zone = d.str(item, attrZone, false)
	e.Health = decodeHealth(item[attrHealth])
	exp = d.num(item, attrExpiresMs, false)
	if s := d.str(item, attrTTL, false); s != "" && d.err == nil {
		e.TTL, d.err = endpoint.ParseTTL(s)
	}
	if d.err != nil {
		return endpoint.Endpoint{}, 0, d.err
	}
	if err := e.ValidateRead(); err != nil {
		return endpoint.Endpoint{}, 0, err
	}
	return e, exp, nil
}

// encodeLocality sets region, zone and health, each omitted when empty or healthy:
// items written before these fields existed read the same as the items written now.
func encodeLocality(item map[string]types.AttributeValue, e endpoint.Endpoint) {
	if e.Region != "" {
		item[attrRegion] = str(e.Region)
	}
	if e.Zone != "" {
		item[attrZone] = str(e.Zone)
	}
	if e.Health != endpoint.Healthy {
		item[attrHealth] = str(e.Health.String())
	}
}

// decodeHealth reads the health attribute liberally: missing is Healthy, and a
// state this release does not know (a newer writer's), or a value that is not a
// string, is Unhealthy, which routes nothing to the endpoint instead of making the
// item unreadable.
func decodeHealth(v types.AttributeValue) endpoint.Health {
	if v == nil {
		return endpoint.Healthy
	}
	s, ok := v.(*types.AttributeValueMemberS)
	if !ok {
		return endpoint.Unhealthy
	}
	h, err := endpoint.ParseHealth(s.Value)
	if err != nil {
		return endpoint.Unhealthy
	}
	return h
}

// decoder keeps the first error, so decode reads as a list of fields.
type decoder struct{ err error }

func (d *decoder) fail(name, want string, v types.AttributeValue) {
	if d.err == nil {
		d.err = fmt.Errorf("attribute %s: want %s, got %T", name, want, v)
	}
}

func (d *decoder) str(item map[string]types.AttributeValue, name string, required bool) string {
	v, ok := item[name]
	if !ok {
		if required {
			d.fail(name, "a string", nil)
		}
		return ""
	}
	s, ok := v.(*types.AttributeValueMemberS)
	if !ok {
		d.fail(name, "a string", v)
		return ""
	}
	return s.Value
}

func (d *decoder) num(item map[string]types.AttributeValue, name string, required bool) int64 {
	v, ok := item[name]
	if !ok {
		if required {
			d.fail(name, "a number", nil)
		}
		return 0
	}
	n, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		d.fail(name, "a number", v)
		return 0
	}
	i, err := strconv.ParseInt(strings.TrimSpace(n.Value), 10, 64)
	if err != nil && d.err == nil {
		d.err = fmt.Errorf("attribute %s: %q is not an integer", name, n.Value)
	}
	return i
}

func (d *decoder) strMap(item map[string]types.AttributeValue, name string) map[string]string {
	v, ok := item[name]
	if !ok {
		return nil
	}
	m, ok := v.(*types.AttributeValueMemberM)
	if !ok {
		d.fail(name, "a map", v)
		return nil
	}
	out := make(map[string]string, len(m.Value))
	for k, v := range m.Value {
		s, ok := v.(*types.AttributeValueMemberS)
		if !ok {
			d.fail(name+"."+k, "a string", v)
			return nil
		}
		out[k] = s.Value
	}
	return out
}

// itemSize estimates an item's size the way DynamoDB counts it (names plus values),
// erring high, for the transaction size limit.
func itemSize(item map[string]types.AttributeValue) int {
	n := 0
	for k, v := range item {
		n += len(k) + valueSize(v)
	}
	return n
}

func valueSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		return len(v.Value) + 1
	case *types.AttributeValueMemberM:
		n := 3
		for k, x := range v.Value {
			n += len(k) + valueSize(x) + 1
		}
		return n
	}
	return 64
}
