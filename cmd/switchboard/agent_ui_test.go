package main

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestAgentUIFlag: `switchboard agent` serves its page at /ui on --metrics-listen,
// and --ui=false turns it off while /metrics stays.
func TestAgentUIFlag(t *testing.T) {
	m := writeFile(t, t.TempDir(), "m.yaml", agentManifest)
	for _, tc := range []struct {
		flag string
		want int
	}{
		{"--ui=true", http.StatusOK},
		{"--ui=false", http.StatusNotFound},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			logs, stop := startAgent(t, "--manifest", m, tc.flag)
			base := metricsBase(t, logs.String)
			if code, _ := fetch(t, base+"/metrics"); code != http.StatusOK {
				t.Fatalf("/metrics = %d", code)
			}
			code, body := fetch(t, base+"/ui")
			if code != tc.want {
				t.Fatalf("/ui with %s = %d, want %d", tc.flag, code, tc.want)
			}
			if code == http.StatusOK && !strings.Contains(body, `data-entry="prod/web/http/10.0.0.1:8080"`) {
				t.Errorf("/ui does not show the manifest's entry:\n%s", body)
			}
			if err := stop(); err != nil {
				t.Fatalf("agent exited with %v", err)
			}
		})
	}
}

var metricsAddr = regexp.MustCompile(`addr=(http://\S+)/metrics`)

// metricsBase waits for the agent's log line that says where it serves metrics.
func metricsBase(t *testing.T, logs func() string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m := metricsAddr.FindStringSubmatch(logs()); m != nil {
			return m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent never said where it serves metrics:\n%s", logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func fetch(t *testing.T, url string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
