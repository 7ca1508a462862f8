package agent

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/agent/manifest"
	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

// A source's held entry stays out of the registry until its source releases it, and
// goes at once when held again (a pod that turns not Ready).
func TestSourceHeldEntries(t *testing.T) {
	reg := memory.New()
	defer reg.Close()
	r := start(t, nil, Options{Publisher: reg})
	pod := mentry(ep("web", "10.0.0.1", 80, 30*time.Second))
	pod.Held = "pod not Ready"
	r.a.SetSource("pods", []manifest.Entry{pod})
	eventually(t, "held entry reported", func() bool {
		s, ok := status(r.a, pod.Endpoint.Key())
		return ok && s.Reason == "pod not Ready"
	})
	if listed(t, reg, pod.Endpoint.Key()) {
		t.Fatal("a held entry was registered")
	}
	pod.Held = ""
	r.a.SetSource("pods", []manifest.Entry{pod})
	eventually(t, "released entry registered", func() bool { return listed(t, reg, pod.Endpoint.Key()) })
	pod.Held = "pod not Ready"
	r.a.SetSource("pods", []manifest.Entry{pod})
	eventually(t, "held again: removed", func() bool { return !listed(t, reg, pod.Endpoint.Key()) })
	r.a.SetSource("pods", nil)
	eventually(t, "entry gone from status", func() bool { _, ok := status(r.a, pod.Endpoint.Key()); return !ok })
}

// An entry that leaves its source is removed, as one that leaves the manifest is;
// the manifest's entries are untouched.
func TestSourceEntriesLeave(t *testing.T) {
	reg := memory.New()
	defer reg.Close()
	fromFile := mentry(ep("file", "10.0.0.9", 80, 0))
	r := start(t, manifestOf(fromFile), Options{Publisher: reg})
	a, b := mentry(ep("web", "10.0.0.1", 80, 30*time.Second)), mentry(ep("web", "10.0.0.2", 80, 30*time.Second))
	r.a.SetSource("pods", []manifest.Entry{a, b})
	eventually(t, "both registered", func() bool {
		return listed(t, reg, a.Endpoint.Key()) && listed(t, reg, b.Endpoint.Key()) && listed(t, reg, fromFile.Endpoint.Key())
	})
	r.a.SetSource("pods", []manifest.Entry{b})
	eventually(t, "a removed", func() bool { return !listed(t, reg, a.Endpoint.Key()) })
	if !listed(t, reg, b.Endpoint.Key()) || !listed(t, reg, fromFile.Endpoint.Key()) {
		t.Fatal("entries that stayed were removed")
	}
}

// A failed manifest load pauses the manifest's entries only: another source's are
// still published.
func TestFailedManifestDoesNotHoldSources(t *testing.T) {
	reg := memory.New()
	defer reg.Close()
	fromFile := mentry(ep("file", "10.0.0.9", 80, 0))
	r := start(t, manifestOf(fromFile), Options{Publisher: reg})
	eventually(t, "manifest entry registered", func() bool { return listed(t, reg, fromFile.Endpoint.Key()) })
	r.a.ReloadFailed(errors.New("bad yaml"))
	pod := mentry(ep("web", "10.0.0.1", 80, 30*time.Second))
	r.a.SetSource("pods", []manifest.Entry{pod})
	eventually(t, "pod registered despite the failed manifest", func() bool { return listed(t, reg, pod.Endpoint.Key()) })
	s, _ := status(r.a, fromFile.Endpoint.Key())
	if s.Reason != ReasonApplyFailed {
		t.Fatalf("manifest entry reason %q, want %q", s.Reason, ReasonApplyFailed)
	}
}

// KeepOnShutdown entries stay registered when the agent stops (a restarted agent
// refreshes them); the others are removed.
func TestKeepOnShutdown(t *testing.T) {
	reg := memory.New()
	defer reg.Close()
	r := start(t, nil, Options{Publisher: reg})
	kept := mentry(ep("web", "10.0.0.1", 80, 30*time.Second))
	kept.KeepOnShutdown = true
	removed := mentry(ep("web", "10.0.0.2", 80, 30*time.Second))
	r.a.SetSource("pods", []manifest.Entry{kept, removed})
	eventually(t, "both registered", func() bool {
		return listed(t, reg, kept.Endpoint.Key()) && listed(t, reg, removed.Endpoint.Key())
	})
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if !listed(t, reg, kept.Endpoint.Key()) {
		t.Error("a KeepOnShutdown entry was removed on shutdown")
	}
	if listed(t, reg, removed.Endpoint.Key()) {
		t.Error("an entry without KeepOnShutdown was left registered")
	}
}

// A key named by the manifest and by a source is published once, as the manifest
// has it.
func TestManifestWinsOverSource(t *testing.T) {
	reg := &recorder{r: memory.New()}
	defer reg.r.Close()
	fromFile := mentry(ep("web", "10.0.0.1", 80, 0))
	fromFile.Endpoint.Weight = 7
	r := start(t, manifestOf(fromFile), Options{Publisher: reg})
	pod := mentry(ep("web", "10.0.0.1", 80, 30*time.Second))
	pod.Held = "pod not Ready"
	r.a.SetSource("pods", []manifest.Entry{pod})
	// A later source's entry showing up proves the loop applied the first source.
	marker := mentry(ep("marker", "10.0.0.3", 80, 30*time.Second))
	r.a.SetSource("zz-marker", []manifest.Entry{marker})
	eventually(t, "registered", func() bool {
		return listed(t, reg.r, fromFile.Endpoint.Key()) && listed(t, reg.r, marker.Endpoint.Key())
	})
	eps, err := reg.r.List(context.Background(), endpoint.Filter{Service: "web"})
	if err != nil || len(eps) != 1 || eps[0].Weight != 7 {
		t.Fatalf("registry holds %+v (%v), want the manifest's entry", eps, err)
	}
	if n := reg.count(registry.OpUnregister, fromFile.Endpoint.Key()); n != 0 {
		t.Fatalf("the source's held copy removed the manifest's entry %d times", n)
	}
	if len(r.a.Status()) != 2 {
		t.Fatalf("status lists %d entries, want the manifest's and the marker", len(r.a.Status()))
	}
}

// lossy applies each batch and then, while lose is set, reports a failure: a write
// that landed but whose reply timed out.
type lossy struct {
	r    registry.Registry
	lose atomic.Bool
}

func (p *lossy) Apply(ctx context.Context, ops []registry.Op) error {
	err := p.r.Apply(ctx, ops)
	if p.lose.Load() {
		return errors.New("deadline exceeded")
	}
	return err
}

// An entry whose register landed although the write reported failure is removed
// once its source holds it: the registry may hold it.
func TestHeldAfterAnUncertainRegister(t *testing.T) {
	mem := memory.New()
	defer mem.Close()
	pub := &lossy{r: mem}
	pub.lose.Store(true)
	r := start(t, nil, Options{Publisher: pub, RetryMin: 20 * time.Millisecond, RetryMax: 50 * time.Millisecond})
	pod := mentry(ep("web", "10.0.0.1", 80, 30*time.Second))
	pod.KeepOnShutdown = true
	r.a.SetSource("pods", []manifest.Entry{pod})
	eventually(t, "in the registry", func() bool { return listed(t, mem, pod.Endpoint.Key()) })
	pod.Held = "pod not Ready"
	r.a.SetSource("pods", []manifest.Entry{pod})
	eventually(t, "held", func() bool { s, _ := status(r.a, pod.Endpoint.Key()); return s.Reason == "pod not Ready" })
	pub.lose.Store(false)
	eventually(t, "removed once writes answer", func() bool { return !listed(t, mem, pod.Endpoint.Key()) })
}

// A key that leaves its source while its removal cannot be written, and comes back
// held (a new pod with the old one's address, not Ready yet), is still removed: the
// old registration is not forgotten.
func TestOrphanThatComesBackHeld(t *testing.T) {
	reg := &recorder{r: memory.New()}
	defer reg.r.Close()
	r := start(t, nil, Options{Publisher: reg, RetryMin: 20 * time.Millisecond, RetryMax: 50 * time.Millisecond})
	pod := mentry(ep("web", "10.0.0.1", 80, 30*time.Second))
	pod.KeepOnShutdown = true
	r.a.SetSource("pods", []manifest.Entry{pod})
	eventually(t, "registered", func() bool { return listed(t, reg.r, pod.Endpoint.Key()) })
	reg.dead.Store(true)
	r.a.SetSource("pods", nil)
	eventually(t, "left the source", func() bool { _, ok := status(r.a, pod.Endpoint.Key()); return !ok })
	pod.Held = "pod not Ready"
	r.a.SetSource("pods", []manifest.Entry{pod})
	eventually(t, "back, held", func() bool { s, _ := status(r.a, pod.Endpoint.Key()); return s.Reason == "pod not Ready" })
	reg.dead.Store(false)
	eventually(t, "the old registration removed", func() bool { return !listed(t, reg.r, pod.Endpoint.Key()) })
}

// Likewise for a manifest entry whose checks start failing after an uncertain
// register: it is removed, not left to its TTL.
func TestUnhealthyAfterAnUncertainRegister(t *testing.T) {
	mem := memory.New()
	defer mem.Close()
	pub := &lossy{r: mem}
	pub.lose.Store(true)
	hc := newSwitchable(t, true)
	e := mentry(ep("web", "10.0.0.1", 80, 30*time.Second), hc.spec(20*time.Millisecond, 1, 1))
	start(t, manifestOf(e), Options{Publisher: pub, RetryMin: 20 * time.Millisecond, RetryMax: 50 * time.Millisecond})
	eventually(t, "in the registry", func() bool { return listed(t, mem, e.Endpoint.Key()) })
	hc.ok.Store(false)
	eventually(t, "a failing probe seen", func() bool { return hc.fail.Load() > 1 })
	pub.lose.Store(false)
	eventually(t, "removed once writes answer", func() bool { return !listed(t, mem, e.Endpoint.Key()) })
}
