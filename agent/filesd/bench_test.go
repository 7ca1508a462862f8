package filesd

import (
	"fmt"
	"testing"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// BenchmarkFileSD10k builds file_sd JSON for 10,000 scraped endpoints in 40 groups.
func BenchmarkFileSD10k(b *testing.B) {
	eps := make([]endpoint.Endpoint, 10000)
	for i := range eps {
		eps[i] = endpoint.Endpoint{
			Cluster: fmt.Sprintf("c%d", i%4), Service: fmt.Sprintf("s%d", i%10), Protocol: "prometheus",
			Address: fmt.Sprintf("10.%d.%d.%d", i>>16&0xff, i>>8&0xff, i&0xff), Port: 9100, Priority: 1,
			Annotations: map[string]string{"team": "edge", "prometheus.io/scrape": "true"},
		}
	}
	endpoint.Sort(eps)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Build(eps); err != nil {
			b.Fatal(err)
		}
	}
}
