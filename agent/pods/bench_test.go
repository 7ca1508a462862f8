package pods_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/switchboard-mesh/switchboard/agent/pods"
)

// BenchmarkAdd is CNI ADD as the plugin sees it: a call over the real Unix socket,
// validated and recorded (temporary file, fsync, rename, fsync of the directory)
// before it returns. The state directory is the test's temporary one: run with
// TMPDIR on the disk of /var/lib to measure that disk.
func BenchmarkAdd(b *testing.B) {
	store, err := pods.OpenStore(b.TempDir(), nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	client, _ := serve(b, store, pods.ServerOptions{})
	ctx := callCtx(b)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		req := addRequest(fmt.Sprintf("ctr-%d", i), "default", fmt.Sprintf("pod-%d", i), "", fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255))
		if _, err := client.Add(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAddParallel is many pods starting at once on one node: the store writes
// one record at a time, so this shows what that costs.
func BenchmarkAddParallel(b *testing.B) {
	store, err := pods.OpenStore(b.TempDir(), nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	client, _ := serve(b, store, pods.ServerOptions{})
	ctx := callCtx(b)
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := int(next.Add(1))
			req := addRequest(fmt.Sprintf("ctr-%d", i), "default", fmt.Sprintf("pod-%d", i), "", fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255))
			if _, err := client.Add(ctx, req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
