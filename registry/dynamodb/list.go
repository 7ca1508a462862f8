package dynamodb

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// List returns the live endpoints the filter's Query or Scan reads; see the package
// documentation for which filters are served by Query. An entry under a hold is live
// while its owner's heartbeat is. The registry.Front keeps those f matches (guarding
// against a store that ignored the server-side filter) and sorts them.
func (r *driver) List(ctx context.Context, f endpoint.Filter) ([]endpoint.Endpoint, error) {
	now := r.now().UnixMilli()
	items, err := r.fetch(ctx, r.plan(f, now))
	if err != nil {
		return nil, r.readError(err)
	}
	eps, owners := r.decodeAll(items, now)
	if len(owners) == 0 {
		return endpointsOf(eps), nil
	}
	beats, err := r.heartbeats(ctx, owners)
	if err != nil {
		return nil, r.readError(fmt.Errorf("read hold heartbeats: %w", err))
	}
	out := eps[:0]
	for _, o := range eps {
		exp, ok := beats[o.owner]
		switch {
		case o.owner == "" || (ok && exp > now):
			out = append(out, o)
		case !ok || exp <= now-r.reapAfter.Milliseconds():
			r.toReap(o.Key(), o.owner)
		}
	}
	return endpointsOf(out), nil
}

func (r *driver) readError(err error) error {
	if unavailable(err) {
		err = fmt.Errorf("%w: %w", registry.ErrUnavailable, err)
	}
	return fmt.Errorf("list %s: %w", r.table, err)
}

// owned is an endpoint read and the hold incarnation it is held by ("" for none).
type owned struct {
	endpoint.Endpoint
	owner string
}

// decodeAll decodes the items that are unexpired endpoints, skipping heartbeats and
// (with a warning) what is not an endpoint, and returns the owners they name.
func (r *driver) decodeAll(items []map[string]types.AttributeValue, now int64) ([]owned, map[string]bool) {
	out := make([]owned, 0, len(items))
	owners := map[string]bool{}
	for _, item := range items {
		if isHeartbeat(item) {
			continue
		}
		e, exp, err := decode(item)
		var owner string
		if err == nil {
			owner, err = decodeOwner(item)
		}
		if err != nil {
			r.log.Warn("dynamodb: skipping an item that is not an endpoint",
				"table", r.table, "pk", attrString(item, attrPK), "sk", attrString(item, attrSK), "err", err)
			continue
		}
		if exp != 0 && exp <= now {
			continue
		}
		if owner != "" {
			owners[owner] = true
		}
		out = append(out, owned{Endpoint: e, owner: owner})
	}
	return out, owners
}

func endpointsOf(os []owned) []endpoint.Endpoint {
	out := make([]endpoint.Endpoint, len(os))
	for i, o := range os {
		out[i] = o.Endpoint
	}
	return out
}

// plan is one Query (keyCond set) or Scan.
type plan struct {
	index   string
	keyCond string
	filters []string
	names   map[string]string
	values  map[string]types.AttributeValue
}

func (p *plan) bind(name, value string) (string, string) {
	p.names["#"+name] = name
	p.values[":"+name] = str(value)
	return "#" + name, ":" + name
}

func (p *plan) equal(name, value string) string {
	n, v := p.bind(name, value)
	return n + " = " + v
}

func (p *plan) prefix(name string, parts []string) string {
	n, v := p.bind(name, strings.Join(parts, sep)+sep)
	return "begins_with(" + n + ", " + v + ")"
}

// plan picks the access path for a normalised filter (see doc.go).
func (r *driver) plan(f endpoint.Filter, nowMs int64) *plan {
	p := &plan{names: map[string]string{}, values: map[string]types.AttributeValue{}}
	// A field is either in the key condition or a filter, never both.
	inKey := map[string]bool{}
	switch {
	case f.Service != "":
		// sk = cluster#protocol#address#port: narrow by the leading fields that are set.
		var parts []string
		for _, fv := range [][2]string{{attrCluster, f.Cluster}, {attrProtocol, f.Protocol}, {attrAddress, f.Address}} {
			if fv[1] == "" {
				break
			}
			parts = append(parts, fv[1])
			inKey[fv[0]] = true
		}
		p.keyCond = p.equal(attrPK, f.Service)
		if len(parts) > 0 {
			p.keyCond += " AND " + p.prefix(attrSK, parts)
		}
		inKey[attrService] = true
	case f.Cluster != "" && r.clusterIndex:
		p.index = clusterIndex
		p.keyCond = p.equal(attrCluster, f.Cluster)
		if f.Protocol != "" {
			p.keyCond += " AND " + p.prefix(attrCSK, []string{f.Protocol})
			inKey[attrProtocol] = true
		}
		inKey[attrCluster] = true
	}
	for _, fv := range [][2]string{{attrService, f.Service}, {attrCluster, f.Cluster}, {attrProtocol, f.Protocol}, {attrAddress, f.Address}} {
		if fv[1] != "" && !inKey[fv[0]] {
			p.filters = append(p.filters, p.equal(fv[0], fv[1]))
		}
	}
	p.names["#exp"] = attrExpiresMs
	p.values[":now"] = num(nowMs)
	p.filters = append(p.filters, "(attribute_not_exists(#exp) OR #exp > :now)")
	return p
}

// fetch runs the plan to the last page.
func (r *driver) fetch(ctx context.Context, p *plan) ([]map[string]types.AttributeValue, error) {
	var (
		items []map[string]types.AttributeValue
		start map[string]types.AttributeValue
		limit *int32
	)
	if r.pageSize > 0 {
		limit = aws.Int32(r.pageSize)
	}
	filter := aws.String(strings.Join(p.filters, " AND "))
	// GSIs cannot be read consistently; the base table is, so a List sees the writes
	// that returned before it.
	consistent := aws.Bool(p.index == "")
	for {
		var (
			page []map[string]types.AttributeValue
			last map[string]types.AttributeValue
		)
		if p.keyCond != "" {
			out, err := r.client.Query(ctx, &dynamodb.QueryInput{
				TableName: aws.String(r.table), IndexName: indexName(p.index),
				KeyConditionExpression: aws.String(p.keyCond), FilterExpression: filter,
				ExpressionAttributeNames: p.names, ExpressionAttributeValues: p.values,
				ExclusiveStartKey: start, Limit: limit, ConsistentRead: consistent,
			})
			if err != nil {
				return nil, err
			}
			page, last = out.Items, out.LastEvaluatedKey
		} else {
			out, err := r.client.Scan(ctx, &dynamodb.ScanInput{
				TableName: aws.String(r.table), FilterExpression: filter,
				ExpressionAttributeNames: p.names, ExpressionAttributeValues: p.values,
				ExclusiveStartKey: start, Limit: limit, ConsistentRead: consistent,
			})
			if err != nil {
				return nil, err
			}
			page, last = out.Items, out.LastEvaluatedKey
		}
		items = append(items, page...)
		if len(last) == 0 {
			return items, nil
		}
		start = last
	}
}

func indexName(s string) *string {
	if s == "" {
		return nil
	}
	return aws.String(s)
}

func attrString(item map[string]types.AttributeValue, name string) string {
	switch v := item[name].(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case *types.AttributeValueMemberN:
		return v.Value
	case nil:
		return ""
	}
	return strconv.Quote(fmt.Sprint(item[name]))
}
