package pods

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/switchboard-mesh/switchboard/agent/manifest"
	"github.com/switchboard-mesh/switchboard/endpoint"
)

// The entries the reconciler last handed to the Sink are kept in the state directory
// (entriesFile), so that an agent restarted while the API server is unreachable goes
// on refreshing its predecessor's entries until its informer has listed the node's
// pods, instead of letting every pod of the node expire out of the registry.

const (
	// entriesFile holds the entries last published. Not *.json: the Store reads
	// those as attachment records.
	entriesFile    = "entries.state"
	entriesVersion = 1
	// maxEntriesSize bounds what is read back: a node's pods make a few hundred
	// entries of a few hundred bytes.
	maxEntriesSize = 64 << 20
)

// sourced is an entry with the pod it is derived for, and whether its address came
// from the pod's attachment records (else from status.podIPs).
type sourced struct {
	Entry       manifest.Entry
	Pod         types.NamespacedName
	FromRecords bool
}

func entriesOf(ss []sourced) []manifest.Entry {
	out := make([]manifest.Entry, len(ss))
	for i, s := range ss {
		out[i] = s.Entry
	}
	return out
}

// entriesFileV1 is the file's form; field names are the format.
type entriesFileV1 struct {
	Version int          `json:"version"`
	Entries []savedEntry `json:"entries"`
}

type savedEntry struct {
	Endpoint       endpoint.Endpoint `json:"endpoint"` // its JSON payload form
	Held           string            `json:"held,omitempty"`
	KeepOnShutdown bool              `json:"keep_on_shutdown,omitempty"`
	Namespace      string            `json:"namespace"`
	Pod            string            `json:"pod"`
	FromRecords    bool              `json:"from_records,omitempty"`
}

func encodeEntries(ss []sourced) ([]byte, error) {
	f := entriesFileV1{Version: entriesVersion, Entries: make([]savedEntry, len(ss))}
	for i, s := range ss {
		f.Entries[i] = savedEntry{
			Endpoint: s.Entry.Endpoint,
			Held:     s.Entry.Held, KeepOnShutdown: s.Entry.KeepOnShutdown,
			Namespace: s.Pod.Namespace, Pod: s.Pod.Name, FromRecords: s.FromRecords,
		}
	}
	b, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("encode entries: %w", err)
	}
	return append(b, '\n'), nil
}

// decodeEntries parses the file strictly, as DecodeRecord does a record: known
// version, no unknown field, nothing after the object, every endpoint valid and
// named once.
func decodeEntries(b []byte) ([]sourced, error) {
	var probe struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, fmt.Errorf("decode entries: %w", err)
	}
	if probe.Version == nil || *probe.Version != entriesVersion {
		return nil, fmt.Errorf("entries version %s: this agent reads version %d", versionString(probe.Version), entriesVersion)
	}
	var f entriesFileV1
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("decode entries: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("decode entries: data after the entries")
	}
	out := make([]sourced, len(f.Entries))
	seen := make(map[endpoint.Key]bool, len(f.Entries))
	for i, s := range f.Entries {
		e := s.Endpoint
		if err := e.Validate(); err != nil {
			return nil, fmt.Errorf("entries[%d]: %w", i, err)
		}
		if seen[e.Key()] {
			return nil, fmt.Errorf("entries[%d]: %s is listed twice", i, e.Key())
		}
		seen[e.Key()] = true
		if s.Namespace == "" || s.Pod == "" {
			return nil, fmt.Errorf("entries[%d]: the pod's namespace and name are required", i)
		}
		out[i] = sourced{Entry: manifest.Entry{Endpoint: e, Held: s.Held, KeepOnShutdown: s.KeepOnShutdown},
			Pod: types.NamespacedName{Namespace: s.Namespace, Name: s.Pod}, FromRecords: s.FromRecords}
	}
	slices.SortFunc(out, func(a, b sourced) int { return compareKeys(a.Entry.Endpoint.Key(), b.Entry.Endpoint.Key()) })
	return out, nil
}

// loadEntries reads the entries the previous agent published. The file's
// modification time is when that agent last stood behind them (the reconciler
// touches it while they are current, and on its way out): an entry whose TTL has run
// out since is gone from the registry already and is not brought back. No file, or
// one that cannot be read, is no entries: a bad file is moved aside and logged at
// ERROR, never fatal.
func loadEntries(dir string, log *slog.Logger, now time.Time) []sourced {
	path := filepath.Join(dir, entriesFile)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		log.Error("cannot read the previous run's entries: none are kept", "file", path, "err", err)
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	var b []byte
	if err == nil {
		b, err = io.ReadAll(io.LimitReader(f, maxEntriesSize+1))
	}
	if err != nil {
		log.Error("cannot read the previous run's entries: none are kept", "file", path, "err", err)
		return nil
	}
	var ss []sourced
	if len(b) > maxEntriesSize {
		err = fmt.Errorf("larger than %d bytes", maxEntriesSize)
	} else {
		ss, err = decodeEntries(b)
	}
	if err != nil {
		moveEntriesAside(log, path, err)
		return nil
	}
	age := max(now.Sub(fi.ModTime()), 0)
	kept := ss[:0]
	for _, s := range ss {
		if ttl := s.Entry.Endpoint.TTL.Duration(); ttl > 0 && age >= ttl {
			continue
		}
		kept = append(kept, s)
	}
	log.Info("the previous run's entries loaded: published until the node's pods are listed",
		"file", path, "entries", len(kept), "expired", len(ss)-len(kept), "age", age.Round(time.Second))
	if len(kept) == 0 {
		return nil
	}
	return kept
}

func moveEntriesAside(log *slog.Logger, path string, cause error) {
	bad := fmt.Sprintf("%s.%d%s", path, time.Now().UnixNano(), badExt)
	if err := os.Rename(path, bad); err != nil {
		log.Error("unreadable saved entries: cannot move them aside, none are kept", "file", path, "err", cause, "rename_err", err)
		return
	}
	log.Error("unreadable saved entries moved aside: none are kept", "file", path, "moved_to", bad, "err", cause)
}

// stillRecorded keeps the entries that do not depend on a record that is gone: an
// entry whose address came from its pod's attachment records stays while a record
// of that pod holds the address; one registered from status.podIPs stays.
func stillRecorded(ss []sourced, recs []Record) []sourced {
	type podIP struct {
		pod types.NamespacedName
		ip  string
	}
	have := map[podIP]bool{}
	for _, rec := range recs {
		for _, ip := range rec.IPs {
			have[podIP{types.NamespacedName{Namespace: rec.Pod.Namespace, Name: rec.Pod.Name}, ip}] = true
		}
	}
	out := make([]sourced, 0, len(ss))
	for _, s := range ss {
		if !s.FromRecords || have[podIP{s.Pod, s.Entry.Endpoint.Address}] {
			out = append(out, s)
		}
	}
	return out
}
