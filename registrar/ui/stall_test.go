package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/registrar"
)

// TestStalledInSnapshotIsLagging: a client that stops reading during its first
// snapshot (its cursor never set) is shown lagging once its send has been under
// way for a moment.
func TestStalledInSnapshotIsLagging(t *testing.T) {
	r := startRegistrar(t, registrar.UIOptions{})
	for b := range 4 {
		eps := make([]endpoint.Endpoint, 5000)
		for i := range eps {
			eps[i] = ep("east", fmt.Sprintf("bulk-%d", b), fmt.Sprintf("10.%d.%d.%d", b, i/256, i%256), 80, "n1")
		}
		r.register(t, eps...)
	}
	conn, err := grpc.NewClient(r.srv.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(1<<16), grpc.WithInitialConnWindowSize(1<<16))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := registrarv1.NewRegistrarClient(conn).WatchEndpoints(ctx, &registrarv1.WatchEndpointsRequest{NodeName: "stalled"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		r.register(t, ep("east", "more", fmt.Sprintf("10.9.%d.%d", i/256, i%256), 80, "n2"))
		_, body := r.get(t, "/ui/state.json")
		var st struct {
			Watchers struct {
				Total   int `json:"total"`
				Lagging int `json:"lagging"`
			} `json:"watchers"`
		}
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatal(err)
		}
		if st.Watchers.Total == 1 && st.Watchers.Lagging == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a client stalled in its snapshot is not shown lagging after 10s: %s", body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
