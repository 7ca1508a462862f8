package hostspeed

import (
	"strings"
	"testing"
)

func TestMeasureReadsEveryFigure(t *testing.T) {
	r, err := Measure()
	if err != nil {
		t.Fatal(err)
	}
	if r.Hash <= 0 || r.Copy <= 0 || r.Loopback <= 0 {
		t.Fatalf("reading %+v: want every figure above zero", r)
	}
	t.Log(r)
	if s := r.String(); !strings.Contains(s, "SHA-256") || !strings.Contains(s, "GB/s") {
		t.Fatalf("String() = %q", s)
	}
}
