package etcd

import (
	"fmt"
	"testing"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// A List larger than a page reads every page at the first page's revision; if that
// revision is compacted between pages, the read starts over, so every key appears
// exactly once and the result is one consistent state.
func TestListPagesAndRestartsOnCompaction(t *testing.T) {
	r := open(t)
	r.pageSize = 3
	ctx := testCtx(t)
	var ops []registry.Op
	for i := range 10 {
		ops = append(ops, registry.Register(ep("prod", "web", "http", fmt.Sprintf("10.0.0.%d", i+1), 80)))
	}
	mustApply(t, r, ops...)
	got, err := r.List(ctx, endpoint.Filter{})
	if err != nil || len(got) != 10 {
		t.Fatalf("paged List = %d endpoints, %v; want 10", len(got), err)
	}

	late := ep("prod", "web", "http", "10.0.0.99", 80)
	pages, compacted := 0, false
	r.hooks.page = func(int64) {
		pages++
		if compacted {
			return
		}
		compacted = true
		// Between the first and second page: a write, then a compaction past the
		// revision the scan is reading at.
		mustApply(t, r, registry.Register(late), registry.Unregister(ops[9].Endpoint))
		if _, err := r.client.Compact(ctx, revision(t, r)); err != nil {
			t.Error(err)
		}
	}
	got, err = r.List(ctx, endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[endpoint.Key]int{}
	for _, e := range got {
		seen[e.Key()]++
	}
	if len(got) != 10 || len(seen) != 10 || seen[late.Key()] != 1 || seen[ops[9].Endpoint.Key()] != 0 {
		t.Fatalf("List across a compaction = %v; want the 10 endpoints after the write, each once", got)
	}
	if pages < 5 {
		t.Fatalf("read %d pages, want the first plus a full restart (at least 5)", pages)
	}
}
