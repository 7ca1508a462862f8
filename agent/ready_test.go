package agent

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/agent/check"
	"github.com/switchboard-mesh/switchboard/registry"
)

// unreachable is a registry whose writes fail, as a backend that went away.
type unreachable struct{ registry.Registry }

func (unreachable) Apply(context.Context, []registry.Op) error { return errUnreachable }

// readyz returns /readyz's status code and body.
func readyz(t *testing.T, base string) (int, string) {
	t.Helper()
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRunReadyz: /readyz answers 200 once the manifest is loaded, every check has
// run once and the registry took the agent's writes; until then, and whenever the
// registry refuses them, 503 with the reason.
func TestRunReadyz(t *testing.T) {
	for _, tc := range []struct {
		name     string
		reg      func(*testing.T) registry.Registry
		argv     []string
		ready    bool
		notReady string // in the body while not ready
	}{
		{"ready", func(t *testing.T) registry.Registry { return newMemory(t) }, []string{"sh", "-c", "sleep 1"}, true, "checks"},
		{"registry unreachable", func(t *testing.T) registry.Registry { return unreachable{newMemory(t)} }, []string{"true"}, false, "registry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			e := ep("web", "10.0.0.1", 80, 0)
			spec := check.Spec{Kind: check.Exec, Argv: tc.argv}
			go func() {
				done <- Run(ctx, Config{Manifest: manifestOf(mentry(e, spec)), Registry: tc.reg(t), HTTP: ln,
					Agent: Options{RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond}})
			}()
			defer func() {
				cancel()
				<-done
				http.DefaultClient.CloseIdleConnections()
			}()
			base := "http://" + ln.Addr().String()
			eventually(t, "/readyz answers", func() bool {
				resp, err := http.Get(base + "/readyz")
				if err == nil {
					resp.Body.Close()
				}
				return err == nil
			})
			if tc.ready {
				// The check takes a second: not ready until it has a result.
				if code, body := readyz(t, base); code != http.StatusServiceUnavailable || !strings.Contains(body, tc.notReady) {
					t.Errorf("/readyz at start = %d %q, want 503 naming %q", code, body, tc.notReady)
				}
				eventually(t, "/readyz 200", func() bool { code, _ := readyz(t, base); return code == http.StatusOK })
				return
			}
			eventually(t, "/readyz naming the registry", func() bool { _, body := readyz(t, base); return strings.Contains(body, tc.notReady) })
			time.Sleep(300 * time.Millisecond) // several more failed writes
			if code, body := readyz(t, base); code != http.StatusServiceUnavailable || !strings.Contains(body, tc.notReady) {
				t.Errorf("/readyz with the registry refusing writes = %d %q, want 503 naming %q", code, body, tc.notReady)
			}
		})
	}
}
