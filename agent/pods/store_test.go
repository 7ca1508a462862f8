package pods_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-mesh/switchboard/agent/pods"
)

func record(container, name string, ips ...string) pods.Record {
	return pods.Record{
		Ref:     pods.Ref{Network: "net", ContainerID: container, IfName: "eth0"},
		Pod:     pods.PodRef{Namespace: "default", Name: name, UID: name + "-uid"},
		Netns:   "/var/run/netns/" + container,
		IPs:     ips,
		Created: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
	}
}

func openStore(t *testing.T, dir string) (*pods.Store, *prometheus.Registry, *logBuffer) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	m, err := pods.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	s, err := pods.OpenStore(dir, newLogger(&logs), m)
	if err != nil {
		t.Fatal(err)
	}
	return s, reg, &logs
}

// What Put recorded is there when the store is opened again, as a restarted agent
// opens it; what Delete forgot is not.
func TestStoreSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	s, _, _ := openStore(t, dir)
	a, b := record("c1", "web-1", "10.0.0.1", "fd00::1"), record("c2/../../x", "web-2", "10.0.0.2")
	for _, r := range []pods.Record{a, b} {
		if err := s.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	again, reg, _ := openStore(t, dir)
	if got := again.List(); !reflect.DeepEqual(got, []pods.Record{a, b}) {
		t.Fatalf("reopened store lists %+v, want %+v", got, []pods.Record{a, b})
	}
	if got := value(t, reg, "switchboard_agent_pod_records"); got != 2 {
		t.Fatalf("records gauge %v, want 2", got)
	}
	if found, err := again.Delete(a.Ref); !found || err != nil {
		t.Fatalf("Delete = %v, %v", found, err)
	}
	third, _, _ := openStore(t, dir)
	if got := third.List(); !reflect.DeepEqual(got, []pods.Record{b}) {
		t.Fatalf("after Delete and reopen: %+v, want only %+v", got, b)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), "..") || strings.Contains(e.Name(), "c2") {
			t.Fatalf("file name %q carries the container id: names must be hashes", e.Name())
		}
	}
}

// A file that cannot be read as a record is moved aside as *.bad, logged at ERROR
// and counted; the other records load, and an interrupted write is cleaned up.
func TestStoreMovesUnreadableFilesAside(t *testing.T) {
	good := record("good", "web-1", "10.0.0.1")
	for _, tc := range []struct {
		name, content, why string
	}{
		{"garbage", "{not json", "decode record"},
		{"truncated", `{"version":1,"ref":{"network":"net"`, "decode record"},
		{"unknown version", `{"version":2,"ref":{"network":"n","container_id":"c","ifname":"eth0"}}`, "record version 2"},
		{"no version", `{"ref":{}}`, "record version missing"},
		{"invalid ip", strings.Replace(encoded(t, record("x", "web-2", "10.0.0.2")), "10.0.0.2", "10.0.0.999", 1), "ips[0]"},
		{"unknown field", strings.Replace(encoded(t, record("x", "web-2", "10.0.0.2")), `"version":1`, `"version":1,"extra":true`, 1), "unknown field"},
		{"misplaced", encoded(t, record("other", "web-2", "10.0.0.2")), "not that of its attachment"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, _, _ := openStore(t, dir)
			if err := s.Put(good); err != nil {
				t.Fatal(err)
			}
			bad := filepath.Join(dir, "00112233445566778899aabbccddeeff.json")
			if err := os.WriteFile(bad, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			tmp := filepath.Join(dir, ".tmp-12345")
			if err := os.WriteFile(tmp, []byte("half a rec"), 0o600); err != nil {
				t.Fatal(err)
			}
			again, reg, logs := openStore(t, dir)
			if got := again.List(); !reflect.DeepEqual(got, []pods.Record{good}) {
				t.Fatalf("loaded %+v, want only the good record", got)
			}
			if n := value(t, reg, "switchboard_agent_pod_records_bad_total"); n != 1 {
				t.Fatalf("bad records counted %v, want 1", n)
			}
			if _, err := os.Stat(bad); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the bad file is still in place: %v", err)
			}
			moved, _ := filepath.Glob(bad + ".*.bad")
			if len(moved) != 1 {
				t.Fatalf("moved-aside files %v, want one", moved)
			}
			if b, _ := os.ReadFile(moved[0]); string(b) != tc.content {
				t.Fatalf("moved-aside content %q, want the original", b)
			}
			if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
				t.Fatal("an interrupted write's temporary file was left")
			}
			if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, tc.why) {
				t.Fatalf("log does not report the file at ERROR with %q:\n%s", tc.why, l)
			}
		})
	}
}

func encoded(t *testing.T, r pods.Record) string {
	t.Helper()
	b, err := pods.EncodeRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestStoreGC(t *testing.T) {
	s, _, _ := openStore(t, t.TempDir())
	keep, stale, other := record("keep", "a", "10.0.0.1"), record("stale", "b", "10.0.0.2"), record("other", "c", "10.0.0.3")
	other.Ref.Network = "other-net"
	for _, r := range []pods.Record{keep, stale, other} {
		if err := s.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	valid := []pods.Ref{{ContainerID: "keep", IfName: "eth0"}} // network empty: the GC's
	if n, err := s.GC("net", valid); n != 1 || err != nil {
		t.Fatalf("GC = %d, %v; want 1 removed", n, err)
	}
	if got := s.List(); !reflect.DeepEqual(got, []pods.Record{keep, other}) {
		t.Fatalf("after GC: %+v", got)
	}
}

// Concurrent writers and readers of one store (run with -race).
func TestStoreConcurrentUse(t *testing.T) {
	s, _, _ := openStore(t, t.TempDir())
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				r := record(fmt.Sprintf("c%d-%d", w, i%5), fmt.Sprintf("p%d", w), fmt.Sprintf("10.%d.0.%d", w, i+1))
				if err := s.Put(r); err != nil {
					t.Error(err)
					return
				}
				_ = s.List()
				if i%3 == 0 {
					if _, err := s.Delete(r.Ref); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	again, _, _ := openStore(t, s.Dir())
	if !reflect.DeepEqual(again.List(), s.List()) {
		t.Fatalf("disk and memory disagree:\n%+v\n%+v", again.List(), s.List())
	}
}

// value is the value of the series name{labels} in g (label names and values in
// pairs): a gauge's or counter's value, a histogram's sample count; 0 when absent.
func value(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			return m.GetGauge().GetValue() + m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return 0
}

// A write whose rename succeeded is the attachment's file even when the directory's
// fsync then fails: Put reports the error, the record is in memory as it is on disk,
// and a DEL removes the file (else it would come back at the next start).
func TestStorePutFailingAfterRenameStaysDeletable(t *testing.T) {
	dir := t.TempDir()
	s, _, _ := openStore(t, dir)
	var fail atomic.Bool
	fail.Store(true)
	pods.SetDirSync(s, func(string) error {
		if fail.Swap(false) {
			return errors.New("injected: directory fsync failed")
		}
		return nil
	})
	r := record("c1", "web-1", "10.0.0.1")
	if err := s.Put(r); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("Put = %v, want the directory fsync's error", err)
	}
	if got, ok := s.Get(r.Ref); !ok || !reflect.DeepEqual(got, r) {
		t.Fatalf("Get = %+v, %v; want the record whose file is on disk", got, ok)
	}
	if found, err := s.Delete(r.Ref); !found || err != nil {
		t.Fatalf("Delete = %v, %v; want found", found, err)
	}
	if again, _, _ := openStore(t, dir); again.Len() != 0 {
		t.Fatalf("after DEL the record comes back at restart: %+v", again.List())
	}
}
