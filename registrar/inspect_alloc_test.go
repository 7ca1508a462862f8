package registrar

import (
	"fmt"
	"testing"
	"time"
)

// TestIdleChangesAllocatesNothing: the page polls Changes ten times a second;
// on an idle registrar that costs no allocation.
func TestIdleChangesAllocatesNothing(t *testing.T) {
	ts := startServer(t, Config{ProgressInterval: time.Hour}) // no PROGRESS events meanwhile
	r := ts.Registrar()
	registerMany(t, ts, "web", 10)
	_, v, ok := r.Changes(0, 0)
	if !ok {
		t.Fatal("Changes(0) not ok")
	}
	eventually(t, "quiet", func() bool {
		_, next, _ := r.Changes(v, 0)
		if next == v {
			return true
		}
		v = next
		return false
	})
	if n := testing.AllocsPerRun(100, func() {
		if _, next, ok := r.Changes(v, 4096); !ok || next != v {
			panic(fmt.Sprintf("Changes(%d) = %d, %v", v, next, ok))
		}
	}); n != 0 {
		t.Fatalf("Changes on an idle registrar allocates %v times a call", n)
	}
}
