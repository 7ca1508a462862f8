package promtext

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestValue(t *testing.T) {
	text := "# TYPE registrar_held_entries gauge\nregistrar_held_entries_total 9\nregistrar_held_entries{x=\"y\"} 8\nregistrar_held_entries 37\n"
	if v, err := Value(strings.NewReader(text), "registrar_held_entries"); err != nil || v != 37 {
		t.Fatalf("Value = %v, %v; want 37 (the unlabelled sample, not a longer name's or a labelled one's)", v, err)
	}
	if _, err := Value(strings.NewReader("registrar_held_sessions 4\n"), "registrar_held_entries"); err == nil {
		t.Fatal("a missing sample was read")
	}
	if _, err := Value(strings.NewReader("registrar_held_entries x\n"), "registrar_held_entries"); err == nil {
		t.Fatal("a sample that is not a number was read")
	}
}

func TestFetch(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte("etcd_mvcc_put_total 1.5e+06\n"))
	}))
	defer srv.Close()
	if v, err := Fetch(context.Background(), srv.Client(), srv.URL+"/metrics", "etcd_mvcc_put_total"); err != nil || v != 1.5e6 {
		t.Fatalf("Fetch = %v, %v", v, err)
	}
	if _, err := Fetch(context.Background(), srv.Client(), srv.URL+"/other", "etcd_mvcc_put_total"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("a 404 read as %v", err)
	}
}
