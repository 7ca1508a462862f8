package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The registrar serves its web page at /ui on the health address by default;
// --ui=false turns it off, and the rest of the health address stays.
func TestRegistrarUIFlag(t *testing.T) {
	for _, on := range []bool{true, false} {
		grpcAddr, healthAddr := "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
		ctx, cancel := context.WithCancel(context.Background())
		args := []string{"registrar", "--cluster-name", "east", "--registry-backend", "memory",
			"--listen", grpcAddr, "--health-listen", healthAddr, "--log-level", "error"}
		if !on {
			args = append(args, "--ui=false")
		}
		done := make(chan error, 1)
		go func() { done <- runCmd(ctx, args...) }()
		get := func(path string) (int, string, error) {
			resp, err := http.Get("http://" + healthAddr + path)
			if err != nil {
				return 0, "", err
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			return resp.StatusCode, string(body), err
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			if code, _, err := get("/healthz"); err == nil && code == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("health address not serving within 30s")
			}
			time.Sleep(50 * time.Millisecond)
		}
		code, body, err := get("/ui")
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("registrar exited with %v", err)
		}
		switch {
		case err != nil:
			t.Fatal(err)
		case on && (code != http.StatusOK || !strings.Contains(body, "<title>Switchboard registrar · east</title>")):
			t.Errorf("/ui by default: %d %.200q, want the page", code, body)
		case !on && code != http.StatusNotFound:
			t.Errorf("/ui with --ui=false: %d, want 404", code)
		}
	}
}

// TestRegistrarUIHistoryBounds: --ui-history, a ring allocated up front, is
// refused above 1,000,000 and below 1 while the page is on (exit 2, naming the
// flag); with --ui=false it is not looked at.
func TestRegistrarUIHistoryBounds(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"--ui-history", "1000001"}, 2},
		{[]string{"--ui-history", "2000000000"}, 2},
		{[]string{"--ui-history", "0"}, 2},
		{[]string{"--ui-history", "-5"}, 2},
		{[]string{"--ui-history", "0", "--ui=false"}, 0},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			// A registrar that starts runs until the context ends: code 0.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			var out, errOut strings.Builder
			cmd := newRootCmd(&out, &errOut)
			cmd.SetArgs(append([]string{"registrar", "--cluster-name", "east", "--registry-backend", "memory",
				"--listen", "127.0.0.1:0", "--health-listen", "127.0.0.1:0", "--log-level", "error"}, c.args...))
			code, msg := 0, ""
			if err := cmd.ExecuteContext(ctx); err != nil {
				msg, code = report(err)
			}
			if code != c.code || (c.code == 2 && !strings.Contains(msg, "--ui-history")) {
				t.Fatalf("exit %d %q, want %d naming --ui-history", code, msg, c.code)
			}
		})
	}
}
