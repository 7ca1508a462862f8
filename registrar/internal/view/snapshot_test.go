package view

import (
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
	"github.com/switchboard-mesh/switchboard/internal/wire"
	"github.com/switchboard-mesh/switchboard/registry"
)

// snapDriver changes a view's endpoints and checks every full snapshot against
// the entries, and the one before against the entries it was built from: a
// snapshot still being sent must not change under its watchers.
type snapDriver struct {
	t        testing.TB
	s        *View
	writes   int
	prev     *Snapshot
	prevWant map[string]bool
	zipped   bool // check the compressed form too (compress_test.go)
}

func newSnapDriver(t testing.TB, target int) *snapDriver {
	s := New(Config{Epoch: 1, History: 64, MaxQueue: 1 << 20})
	s.parts.target = target
	return &snapDriver{t: t, s: s}
}

// register adds e, or updates it in place (a new weight every time).
func (d *snapDriver) register(e endpoint.Endpoint) {
	d.writes++
	e.Weight = d.writes
	d.apply(registry.Register(e))
}

func (d *snapDriver) unregister(e endpoint.Endpoint) { d.apply(registry.Unregister(e)) }

func (d *snapDriver) apply(op registry.Op) {
	d.t.Helper()
	if _, err := d.s.Accept([]registry.Op{op}, nil, nil); err != nil {
		d.t.Fatal(err)
	}
}

// empty unregisters every endpoint.
func (d *snapDriver) empty() {
	for _, e := range d.s.entries {
		d.unregister(e.ep)
	}
}

func (d *snapDriver) check() {
	d.t.Helper()
	want := make(map[string]bool, len(d.s.entries))
	for _, e := range d.s.entries {
		want[string(e.wire)] = true
	}
	snap := d.s.Snapshot()
	if snap.At != d.s.Current() {
		d.t.Fatalf("snapshot at %v, state at %v", snap.At, d.s.Current())
	}
	checkSnapshot(d.t, snap, want)
	if d.zipped {
		checkCompressed(d.t, snap.Compressed(), want)
	}
	d.checkSizes(snap)
	if d.prev != nil {
		checkSnapshot(d.t, d.prev, d.prevWant)
		if d.zipped {
			checkCompressed(d.t, d.prev.Compressed(), d.prevWant)
		}
	}
	d.prev, d.prevWant = snap, want
}

// checkSizes fails unless the buckets follow the fleet's size and the snapshot
// is not many more messages than ChunkBytes ones would be.
func (d *snapDriver) checkSizes(snap *Snapshot) {
	d.t.Helper()
	p, total := d.s.parts, 0
	for _, e := range d.s.entries {
		total += wire.SnapshotItemSize(e.wire)
	}
	if avg := total / len(p.buckets); p.bytes != total || avg > 2*p.target || len(p.buckets) > 1 && avg < p.target/2 {
		d.t.Fatalf("%d buckets counted %d bytes for %d in the state (target %d a bucket)", len(p.buckets), p.bytes, total, p.target)
	}
	if snap.Len() > 2*total/ChunkBytes+1 {
		d.t.Fatalf("%d messages for %d bytes", snap.Len(), total)
	}
}

// checkSnapshot fails unless snap holds exactly the endpoints of want (in wire
// form), each once, in messages of at most ChunkBytes with their item counts.
func checkSnapshot(t testing.TB, snap *Snapshot, want map[string]bool) {
	t.Helper()
	checkMessages(t, snap, want, func(msg []byte) []byte { return msg })
}

// checkMessages is checkSnapshot of messages whose items are items(message).
func checkMessages(t testing.TB, snap *Snapshot, want map[string]bool, items func([]byte) []byte) {
	t.Helper()
	if len(snap.Items) != len(snap.starts) {
		t.Fatalf("%d item counts for %d chunks", len(snap.Items), len(snap.starts))
	}
	seen := make(map[string]bool, len(want))
	parts := 0
	for i := range snap.Len() {
		b := concat(snap, i)
		if len(b) == 0 || len(b) > ChunkBytes {
			t.Fatalf("chunk %d of %d: %d bytes, want 1..%d", i, snap.Len(), len(b), ChunkBytes)
		}
		snap.Parts(i, func(*Part) { parts++ })
		b = items(b)
		n := 0
		for ; len(b) > 0; n++ {
			num, typ, n := protowire.ConsumeTag(b)
			item, m := protowire.ConsumeBytes(b[max(n, 0):])
			if n < 0 || m < 0 || num != wire.EventFieldEndpoints || typ != protowire.BytesType {
				t.Fatalf("chunk %d: malformed, or a field other than endpoints (%d)", i, num)
			}
			b = b[n+m:]
			if !want[string(item)] || seen[string(item)] {
				t.Fatalf("chunk %d: %v is not in the state, in another version, or a second time", i, itemEndpoint(item))
			}
			seen[string(item)] = true
		}
		if n != snap.Items[i] {
			t.Fatalf("chunk %d holds %d endpoints, counted %d", i, n, snap.Items[i])
		}
	}
	if len(seen) != len(want) {
		t.Fatalf("snapshot holds %d endpoints, the state %d", len(seen), len(want))
	}
	if parts != snap.PartCount() {
		t.Fatalf("messages of %d parts, counted %d", parts, snap.PartCount())
	}
}

func itemEndpoint(item []byte) *registryv1.Endpoint {
	var p registryv1.Endpoint
	_ = proto.Unmarshal(item, &p) // for the failure message only
	return &p
}

// After random registrations, updates in place and removals, emptying and
// refilling, every full snapshot holds exactly the state, however many buckets
// it was built from: at the real bucket size, and at one so small that buckets
// of a few endpoints are emptied and refilled all the time.
func TestSnapshotFollowsRandomChanges(t *testing.T) {
	const keys = 4000 // about 220 KB: several messages, buckets redistributed
	for _, target := range []int{bucketBytes, 256} {
		for seed := range uint64(3) {
			d := newSnapDriver(t, target)
			d.zipped = seed == 0 // its cost is the decompression: one run each
			rng := rand.New(rand.NewPCG(seed, uint64(target)))
			churn := func(steps int) {
				for range steps {
					e := fleetEndpoint(rng.IntN(keys))
					switch r := rng.IntN(100); {
					case r < 50:
						d.register(e)
					case r < 99:
						d.unregister(e)
					default:
						d.check()
					}
				}
				d.check()
			}
			for i := range keys {
				d.register(fleetEndpoint(i))
			}
			d.check()
			churn(3000)
			d.empty()
			d.check()
			if d.prev.Len() != 0 {
				t.Fatalf("snapshot of no endpoint has %d chunks", d.prev.Len())
			}
			for i := range keys / 2 {
				d.register(fleetEndpoint(i))
			}
			d.check()
			churn(3000)
		}
	}
}

// The same with the changes chosen by the fuzzer: each byte registers (updates),
// unregisters or checks one of 64 endpoints, or empties the state; buckets hold a
// few endpoints each.
func FuzzSnapshot(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 0xc0, 0x40, 0x41, 0xc0, 0x80, 0, 0xc0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		d := newSnapDriver(t, 128)
		d.zipped = true
		for _, op := range ops {
			e := fleetEndpoint(int(op & 63))
			switch op >> 6 {
			case 0:
				d.register(e)
			case 1:
				d.unregister(e)
			case 2:
				d.empty()
			default:
				d.check()
			}
		}
		d.check()
	})
}

func forgetSnapshot(s *View) {
	s.snap = nil
	for i := range s.parts.buckets {
		s.parts.buckets[i].enc = nil
	}
}

// concat is message i's bytes: its parts, as the transport sends them.
func concat(snap *Snapshot, i int) []byte {
	var b []byte
	snap.Parts(i, func(p *Part) { b = append(b, p.Data...) })
	return b
}
