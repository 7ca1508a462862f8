package dynamodb

import (
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/dynamotest"
)

// BenchmarkListByService lists 10,000 endpoints through the real SDK and minidyn
// (in-process HTTP, JSON both ways). The numbers measure this backend plus minidyn,
// whose Query evaluates the key condition on every item of the table; on DynamoDB a
// Query reads only the partition. Setup writes the endpoints once per table.
//
//	one-service: 10,000 endpoints in one service; List(service) returns all of them.
//	1-of-100:    10,000 endpoints in 100 services; List(service) returns 100.
//	all-scan:    the 10,000 of one-service listed with no filter (the registrar's poll).
func BenchmarkListByService(b *testing.B) {
	srv := dynamotest.Start(b)
	one := openTest(b, srv)
	register(b, one, genEndpoints(1, 10_000)...)
	many := openTest(b, srv)
	register(b, many, genEndpoints(100, 100)...)
	for _, c := range []struct {
		name string
		r    reg
		f    endpoint.Filter
		want int
	}{
		{"one-service", one, endpoint.Filter{Service: "svc0"}, 10_000},
		{"1-of-100", many, endpoint.Filter{Service: "svc42"}, 100},
		{"all-scan", one, endpoint.Filter{}, 10_000},
	} {
		b.Run(c.name, func(b *testing.B) {
			ctx := testCtx(b)
			b.ReportAllocs()
			for b.Loop() {
				got, err := c.r.List(ctx, c.f)
				if err != nil || len(got) != c.want {
					b.Fatalf("List(%+v) = %d endpoints, %v; want %d", c.f, len(got), err, c.want)
				}
			}
			b.ReportMetric(float64(c.want), "endpoints/op")
		})
	}
}

// genEndpoints returns services*each endpoints spread over 4 clusters.
func genEndpoints(services, each int) []endpoint.Endpoint {
	out := make([]endpoint.Endpoint, 0, services*each)
	for s := range services {
		for i := range each {
			e := ep(fmt.Sprintf("cluster%d", i%4), fmt.Sprintf("svc%d", s), "http",
				fmt.Sprintf("10.%d.%d.%d", s%256, i/256, i%256), 8080)
			e.Node = fmt.Sprintf("node-%d", i%50)
			e.Annotations = map[string]string{"team": "edge", "version": "v1"}
			out = append(out, e)
		}
	}
	return out
}

// BenchmarkDecodeSort10k is the backend's own share of listing 10,000 endpoints:
// decoding the items, the client-side expiry and filter check, and the sort. The
// rest of BenchmarkListByService is the SDK's JSON and HTTP, and minidyn.
func BenchmarkDecodeSort10k(b *testing.B) {
	now := time.Now()
	eps := genEndpoints(1, 10_000)
	items := make([]map[string]types.AttributeValue, len(eps))
	for i, e := range eps {
		items[i] = encode(e, now)
	}
	f := endpoint.Filter{Service: "svc0"}
	b.ReportAllocs()
	for b.Loop() {
		out := make([]endpoint.Endpoint, 0, len(items))
		for _, item := range items {
			e, exp, err := decode(item)
			if err != nil {
				b.Fatal(err)
			}
			if (exp == 0 || exp > now.UnixMilli()) && f.Match(e) {
				out = append(out, e)
			}
		}
		endpoint.Sort(out)
		if len(out) != len(items) {
			b.Fatalf("%d endpoints, want %d", len(out), len(items))
		}
	}
}
