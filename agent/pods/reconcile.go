package pods

import (
	"cmp"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/switchboard-mesh/switchboard/agent/manifest"
	"github.com/switchboard-mesh/switchboard/endpoint"
)

// clockSkew is how much earlier than its pod's creation time (the API server's clock)
// a record may claim to be (the node's clock) and still belong to the pod. It only
// matters for records without a pod uid.
const clockSkew = time.Minute

// reconciler is the state of the Controller's loop. Only the loop goroutine touches
// it.
type reconciler struct {
	c     *Controller
	log   *slog.Logger
	store *Store
	src   *podSource // nil without an API client

	last      []manifest.Entry // what the Sink was last given
	published bool
	// previous are the entries the previous run published (entries.go), handed to
	// the Sink until the informer has synced; nil once it has, or when there are none.
	previous []sourced
	// saved is what the entries file holds when savedOK; touched is when its
	// modification time was last set.
	saved       []sourced
	savedOK     bool
	saveFailing bool
	touched     time.Time
	// Once-per-pod logs: (pod, reason) skips, pods registered without a record, keys
	// two pods derive. Pruned each step to what is still true.
	skipped  map[skipKey]bool
	noRecord map[types.UID]bool
	dupes    map[endpoint.Key]bool
}

type skipKey struct {
	pod    types.UID
	reason string
}

func newReconciler(c *Controller, store *Store, src *podSource) *reconciler {
	return &reconciler{c: c, log: c.log, store: store, src: src,
		skipped: map[skipKey]bool{}, noRecord: map[types.UID]bool{}, dupes: map[endpoint.Key]bool{}}
}

// syncPoll is how often the loop looks whether the informer has synced: nothing
// nudges it when that happens.
const syncPoll = 50 * time.Millisecond

// run steps at once, on every nudge (a record changed, an informer event) and every
// resync period, until ctx ends.
func (r *reconciler) run(ctx context.Context) {
	timer := time.NewTimer(r.c.cfg.Resync)
	defer timer.Stop()
	for {
		next := r.c.cfg.Resync
		if !r.step(time.Now()) && r.src != nil {
			next = min(next, syncPoll)
		}
		timer.Reset(next)
		select {
		case <-ctx.Done():
			r.touch(time.Now(), true) // the entries are current until now
			return
		case <-r.c.wake:
		case <-timer.C:
		}
	}
}

// step computes the entries of every managed pod of the node and hands them to the
// Sink when they changed; it also deletes the records of pods that are gone. Before
// the informer's first list nothing is derived (a pod missing from a partial view is
// not gone): the previous run's entries are handed over instead, less those whose
// record is gone. It reports whether it could look at the pods.
func (r *reconciler) step(now time.Time) bool {
	if r.src == nil {
		return false
	}
	if !r.src.Synced() {
		if r.previous != nil {
			r.hand(stillRecorded(r.previous, r.store.List()), now)
		}
		return false
	}
	if r.previous != nil {
		r.previous = nil
		r.log.Info("the node's pods are listed: their entries replace the previous run's")
	}
	recs := r.store.List()
	pods := r.src.pods()
	byName := recordsByPod(recs)
	entries, managed := r.desired(pods, byName)
	r.collectGone(pods, recs, now)
	r.c.m.setManaged(managed)
	r.hand(entries, now)
	return true
}

// hand gives the Sink the entries when they changed, and keeps them in the entries
// file.
func (r *reconciler) hand(ss []sourced, now time.Time) {
	entries := entriesOf(ss)
	if !r.published || !reflect.DeepEqual(entries, r.last) {
		r.c.cfg.Sink.SetSource(SourceName, entries)
		r.last, r.published = entries, true
		r.log.Debug("pods' entries handed to the agent", "entries", len(entries))
	}
	r.save(ss, now)
}

// save writes the entries file when ss is not what it holds (atomically: a
// temporary file, fsync, rename, fsync of the directory). A failed write is tried
// again on the next step; meanwhile the file is not touched, so that the older
// entries it may hold age out by their TTL.
func (r *reconciler) save(ss []sourced, now time.Time) {
	if r.savedOK && reflect.DeepEqual(ss, r.saved) {
		r.touch(now, false)
		return
	}
	r.savedOK = false
	path := filepath.Join(r.store.Dir(), entriesFile)
	b, err := encodeEntries(ss)
	if err == nil {
		_, err = r.store.writeFile(entriesFile, b)
	}
	if err != nil {
		if !r.saveFailing {
			r.saveFailing = true
			r.log.Error("cannot save the published entries (tried again on every step): an agent restarted without the API server would publish older ones",
				"file", path, "err", err)
		}
		return
	}
	if r.saveFailing {
		r.saveFailing = false
		r.log.Info("published entries saved again", "file", path)
	}
	r.saved, r.savedOK, r.touched = ss, true, now
}

// touch sets the entries file's modification time to now, at most every quarter of
// the TTL unless forced: a restarted agent takes it for when its predecessor last
// stood behind the entries. Only a file that holds the current entries is touched.
func (r *reconciler) touch(now time.Time, force bool) {
	every := r.c.cfg.TTL / 4
	if !r.savedOK || every <= 0 || !force && now.Sub(r.touched) < every {
		return
	}
	path := filepath.Join(r.store.Dir(), entriesFile)
	if err := os.Chtimes(path, now, now); err != nil {
		r.log.Warn("cannot touch the saved entries", "file", path, "err", err)
		return
	}
	r.touched = now
}

// owned is one pod's entries, kept with the pod while keys that two pods derive are
// settled.
type owned struct {
	e           manifest.Entry
	pod         *corev1.Pod
	fromRecords bool
}

// desired derives every pod's entries and returns them sorted, with how many pods
// have some.
func (r *reconciler) desired(pods []*corev1.Pod, byName map[types.NamespacedName][]Record) ([]sourced, int) {
	byKey := map[endpoint.Key]owned{}
	managed := 0
	seenPods := make(map[types.UID]bool, len(pods))
	for _, pod := range pods {
		seenPods[pod.UID] = true
		recs := recordsOf(pod, byName[types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}])
		es, skip := Derive(pod, ipsOf(recs), r.c.derive)
		if skip != "" {
			r.skip(pod, skip)
			continue
		}
		if len(es) == 0 {
			continue
		}
		managed++
		if len(recs) == 0 {
			r.registeredWithoutRecord(pod)
		}
		for _, e := range es {
			r.claim(byKey, owned{e, pod, len(recs) > 0})
		}
	}
	r.prune(seenPods, byKey)
	out := make([]sourced, 0, len(byKey))
	for _, o := range byKey {
		out = append(out, sourced{Entry: o.e, Pod: types.NamespacedName{Namespace: o.pod.Namespace, Name: o.pod.Name}, FromRecords: o.fromRecords})
	}
	slices.SortFunc(out, func(a, b sourced) int { return compareKeys(a.Entry.Endpoint.Key(), b.Entry.Endpoint.Key()) })
	return out, managed
}

// claim adds o unless a newer pod derives the same key: two pods can hold one address
// only when one of them is gone and its status is stale, and the newer one is the
// one that is there. Creation times have one-second granularity, so a tie goes to
// the pod whose namespace/name, then uid, sorts last: the same pod wins on every step
// whatever order the informer lists them in, and the source is not re-set each time.
func (r *reconciler) claim(byKey map[endpoint.Key]owned, o owned) {
	k := o.e.Endpoint.Key()
	prev, ok := byKey[k]
	if !ok {
		byKey[k] = o
		return
	}
	winner, loser := prev, o
	if comparePodAge(o.pod, prev.pod) > 0 {
		winner, loser = o, prev
	}
	byKey[k] = winner
	if !r.dupes[k] {
		r.dupes[k] = true
		r.log.Warn("two pods derive one endpoint: the newer pod's is published", "entry", k.String(),
			"pod", podName(winner.pod), "other_pod", podName(loser.pod))
	}
}

// comparePodAge orders pods by creation time, then namespace, name and uid: a total
// order, so that which of two pods counts as the newer does not depend on the order
// they are looked at in.
func comparePodAge(a, b *corev1.Pod) int {
	return cmp.Or(a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time),
		strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name),
		strings.Compare(string(a.UID), string(b.UID)))
}

func (r *reconciler) skip(pod *corev1.Pod, reason string) {
	k := skipKey{pod.UID, reason}
	if r.skipped[k] {
		return
	}
	r.skipped[k] = true
	r.c.m.correction(CorrectionSkipped)
	r.log.Warn("pod not registered", "pod", podName(pod), "reason", reason)
}

func (r *reconciler) registeredWithoutRecord(pod *corev1.Pod) {
	if r.noRecord[pod.UID] {
		return
	}
	r.noRecord[pod.UID] = true
	r.c.m.correction(CorrectionNoRecord)
	r.log.Info("pod registered from its status: no CNI record (added while the agent was down?)", "pod", podName(pod))
}

// prune forgets once-logged facts about pods and keys that are no longer there, so
// that the maps stay as small as the node and a fact that comes back is logged again.
func (r *reconciler) prune(pods map[types.UID]bool, byKey map[endpoint.Key]owned) {
	for k := range r.skipped {
		if !pods[k.pod] {
			delete(r.skipped, k)
		}
	}
	for uid := range r.noRecord {
		if !pods[uid] {
			delete(r.noRecord, uid)
		}
	}
	for k := range r.dupes {
		if _, ok := byKey[k]; !ok {
			delete(r.dupes, k)
		}
	}
}

// collectGone deletes the records whose pod is gone from the synced informer (or is
// another pod now: a different uid), once they are older than one resync period: a
// record newer than that may belong to a pod the informer has not seen yet. This is
// what makes up for a DEL the agent never got.
func (r *reconciler) collectGone(pods []*corev1.Pod, recs []Record, now time.Time) {
	byName := make(map[types.NamespacedName]*corev1.Pod, len(pods))
	for _, p := range pods {
		byName[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = p
	}
	for _, rec := range recs {
		if p := byName[types.NamespacedName{Namespace: rec.Pod.Namespace, Name: rec.Pod.Name}]; p != nil && owns(p, rec) {
			continue
		}
		if now.Sub(rec.Created) < r.c.cfg.Resync {
			continue
		}
		found, err := r.store.Delete(rec.Ref)
		if err != nil {
			r.log.Error("cannot delete the record of a gone pod", "pod", rec.Pod.String(), "container", rec.Ref.ContainerID, "err", err)
			continue
		}
		if found {
			r.c.m.correction(CorrectionPodGone)
			r.log.Info("record of a gone pod deleted (its CNI DEL never came)", "pod", rec.Pod.String(), "uid", rec.Pod.UID,
				"container", rec.Ref.ContainerID, "ifname", rec.Ref.IfName, "ips", rec.IPs)
		}
	}
}

// recordsByPod groups records by pod namespace and name.
func recordsByPod(recs []Record) map[types.NamespacedName][]Record {
	out := map[types.NamespacedName][]Record{}
	for _, rec := range recs {
		k := types.NamespacedName{Namespace: rec.Pod.Namespace, Name: rec.Pod.Name}
		out[k] = append(out[k], rec)
	}
	return out
}

// recordsOf keeps the records (of pod's name) that belong to pod.
func recordsOf(pod *corev1.Pod, recs []Record) []Record {
	var out []Record
	for _, rec := range recs {
		if owns(pod, rec) {
			out = append(out, rec)
		}
	}
	return out
}

// owns reports whether rec, a record of pod's namespace and name, is an attachment of
// pod: by uid when the runtime sent one; without, a pod created after the
// attachment is another pod of the same name (a StatefulSet's replacement). The
// runtime's uid of a static pod is the kubelet's config hash, which the mirror pod
// the API shows carries in its kubernetes.io/config.mirror annotation, not as its
// UID.
func owns(pod *corev1.Pod, rec Record) bool {
	if rec.Pod.UID != "" {
		return rec.Pod.UID == string(pod.UID) || rec.Pod.UID == pod.Annotations[corev1.MirrorPodAnnotationKey]
	}
	return !rec.Created.Add(clockSkew).Before(pod.CreationTimestamp.Time)
}

// ipsOf is every address of the records, each once.
func ipsOf(recs []Record) []string {
	var out []string
	for _, rec := range recs {
		for _, ip := range rec.IPs {
			if !slices.Contains(out, ip) {
				out = append(out, ip)
			}
		}
	}
	return out
}

func podName(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }
