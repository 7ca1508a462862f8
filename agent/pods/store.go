package pods

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Store keeps one file per attachment under a directory, so that what CNI ADD told
// the agent survives the agent: a record is on disk (file and directory entry both
// fsynced) before Put returns, and OpenStore finds every record again. It is safe
// for concurrent use.
type Store struct {
	dir string
	log *slog.Logger
	m   *Metrics

	// stripes order the disk writes of one attachment: two writes for it must reach
	// the disk in the order their callers made them. Writes for different
	// attachments (pods starting together) fsync in parallel.
	stripes [16]sync.Mutex
	// mu guards recs, so that readers (the reconciler) never wait for an fsync.
	mu   sync.RWMutex
	recs map[Ref]Record

	// Test hooks (export_test.go), nil otherwise: they replace the fsync of a
	// written file and of the directory.
	fileSync func(*os.File) error
	dirSync  func(dir string) error
}

const (
	recordExt = ".json"
	badExt    = ".bad"
	tmpPrefix = ".tmp-"
)

// OpenStore creates dir if needed (0700: the agent alone reads it) and loads every
// record in it. A file that does not decode, has an unknown version or does not
// belong under its name is moved aside as NAME.<time>.bad, logged at ERROR and
// counted (switchboard_agent_pod_records_bad_total): it neither stops the agent nor
// disappears without a trace. Leftover temporary files of writes cut short are
// removed: their rename never happened, so their ADD never succeeded.
func OpenStore(dir string, log *slog.Logger, m *Metrics) (*Store, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("attachment records: %w", err)
	}
	s := &Store{dir: dir, log: log, m: m, recs: map[Ref]Record{}}
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("attachment records: %w", err)
	}
	for _, de := range des {
		s.loadEntry(de)
	}
	m.setRecords(len(s.recs))
	log.Info("attachment records loaded", "dir", dir, "records", len(s.recs))
	return s, nil
}

func (s *Store) loadEntry(de fs.DirEntry) {
	name := de.Name()
	path := filepath.Join(s.dir, name)
	switch {
	case !de.Type().IsRegular():
	case strings.HasPrefix(name, tmpPrefix):
		if err := os.Remove(path); err != nil {
			s.log.Warn("cannot remove an interrupted write", "file", path, "err", err)
		}
	case strings.HasSuffix(name, recordExt):
		r, err := readRecord(path)
		if err == nil && name != fileName(r.Ref) {
			err = fmt.Errorf("the file's name is not that of its attachment (%s)", fileName(r.Ref))
		}
		if err != nil {
			s.moveAside(path, err)
			return
		}
		s.recs[r.Ref] = r
	}
}

func readRecord(path string) (Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return Record{}, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxRecordSize+1))
	if err != nil {
		return Record{}, err
	}
	return DecodeRecord(b)
}

// moveAside renames a file that cannot be read as a record out of the way, keeping
// it for whoever investigates. The time in the new name keeps earlier bad copies.
func (s *Store) moveAside(path string, cause error) {
	s.m.badRecord()
	bad := fmt.Sprintf("%s.%d%s", path, time.Now().UnixNano(), badExt)
	if err := os.Rename(path, bad); err != nil {
		s.log.Error("unreadable attachment record: cannot move it aside, it is skipped", "file", path, "err", cause, "rename_err", err)
		return
	}
	s.log.Error("unreadable attachment record moved aside", "file", path, "moved_to", bad, "err", cause)
}

// fileName is the record's file name: a hash of its attachment, because container
// ids and interface names are runtime-chosen strings that may hold '/', '..' or more
// bytes than a file name may.
func fileName(ref Ref) string {
	h := sha256.New()
	for _, s := range [...]string{ref.Network, ref.ContainerID, ref.IfName} {
		h.Write([]byte(s))
		h.Write([]byte{0}) // a separator no field can hold: ("a","bc") ≠ ("ab","c")
	}
	return hex.EncodeToString(h.Sum(nil)[:16]) + recordExt
}

// Dir is the directory the store keeps its files in.
func (s *Store) Dir() string { return s.dir }

// Put records r durably, replacing a record of the same attachment. A zero Created
// is set to now.
func (s *Store) Put(r Record) error { return s.PutContext(context.Background(), r) }

// PutContext is Put for a caller that may give up, such as a CNI ADD whose plugin
// stops waiting: when ctx is done before the write starts, nothing is recorded; when
// it is done by the time the write is on disk, the record is withdrawn again, and
// the error wraps ctx's. Either way a DEL the caller's give-up let in before the
// write does not find the record come back after it.
//
// Once the file is renamed into place the record is in memory too, even when the
// directory's fsync then fails and Put returns that error: memory and disk agree, so
// that a DEL removes the file rather than leave it to come back at the next start.
func (s *Store) PutContext(ctx context.Context, r Record) error {
	if err := r.normalize(); err != nil {
		return err
	}
	if r.Created.IsZero() {
		r.Created = time.Now()
	}
	b, err := EncodeRecord(r)
	if err != nil {
		return err
	}
	name := fileName(r.Ref)
	unlock := s.lock(name)
	defer unlock()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("record attachment: not written, its caller gave up: %w", err)
	}
	renamed, err := s.writeFile(name, b)
	if renamed {
		s.mu.Lock()
		s.recs[r.Ref] = r
		n := len(s.recs)
		s.mu.Unlock()
		s.m.setRecords(n)
	}
	if err != nil {
		return fmt.Errorf("record attachment: %w", err)
	}
	if cerr := ctx.Err(); cerr != nil {
		if _, err := s.deleteLocked(r.Ref); err != nil {
			return fmt.Errorf("record attachment: its caller gave up (%w), and withdrawing it failed: %w", cerr, err)
		}
		return fmt.Errorf("record attachment: withdrawn, its caller gave up: %w", cerr)
	}
	return nil
}

// writeFile replaces name with b atomically and durably: a temporary file, fsync,
// rename, fsync of the directory (without which the rename may not survive a crash).
// renamed reports whether the new file is in place, even when err is not nil.
func (s *Store) writeFile(name string, b []byte) (renamed bool, err error) {
	f, err := os.CreateTemp(s.dir, tmpPrefix+"*")
	if err != nil {
		return false, err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = s.syncFile(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(s.dir, name))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return false, err
	}
	return true, s.syncDir()
}

func (s *Store) syncFile(f *os.File) error {
	if s.fileSync != nil {
		return s.fileSync(f)
	}
	return f.Sync()
}

func (s *Store) syncDir() error {
	if s.dirSync != nil {
		return s.dirSync(s.dir)
	}
	return syncDir(s.dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// Delete forgets an attachment; found says whether it was recorded. Forgetting one
// that is not recorded is not an error (CNI DEL may come more than once).
func (s *Store) Delete(ref Ref) (found bool, err error) {
	unlock := s.lock(fileName(ref))
	defer unlock()
	return s.deleteLocked(ref)
}

// lock locks the stripe of a record's file name (a hash already) and returns its
// unlock.
func (s *Store) lock(name string) func() {
	m := &s.stripes[strings.IndexByte(hexDigits, name[0])]
	m.Lock()
	return m.Unlock
}

const hexDigits = "0123456789abcdef"

// deleteLocked removes the file, then the record, so that a failed removal leaves
// memory and disk agreeing that the attachment is still recorded. The ref's stripe
// must be locked.
func (s *Store) deleteLocked(ref Ref) (bool, error) {
	s.mu.RLock()
	_, found := s.recs[ref]
	s.mu.RUnlock()
	if !found {
		return false, nil
	}
	if err := os.Remove(filepath.Join(s.dir, fileName(ref))); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return true, fmt.Errorf("forget attachment: %w", err)
	}
	if err := s.syncDir(); err != nil {
		return true, fmt.Errorf("forget attachment: %w", err)
	}
	s.mu.Lock()
	delete(s.recs, ref)
	n := len(s.recs)
	s.mu.Unlock()
	s.m.setRecords(n)
	return true, nil
}

// GC forgets every attachment of network that valid does not list and returns how
// many it forgot. An entry of valid with an empty network counts as network's.
func (s *Store) GC(network string, valid []Ref) (int, error) {
	keep := make(map[Ref]bool, len(valid))
	for _, v := range valid {
		if v.Network == "" {
			v.Network = network
		}
		keep[v] = true
	}
	var stale []Ref
	s.mu.RLock()
	for ref := range s.recs {
		if ref.Network == network && !keep[ref] {
			stale = append(stale, ref)
		}
	}
	s.mu.RUnlock()
	removed := 0
	var errs []error
	for _, ref := range stale {
		found, err := s.Delete(ref) // an ADD of it since the scan is forgotten too: the runtime does not list it
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if found {
			removed++
		}
	}
	return removed, errors.Join(errs...)
}

// Get returns the record of an attachment.
func (s *Store) Get(ref Ref) (Record, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	r, ok := s.recs[ref]
	return r, ok
}

// List returns every record, ordered by attachment so that callers see a stable
// order. The records share their IPs slices with the store: do not modify them.
func (s *Store) List() []Record {
	s.mu.RLock()
	out := make([]Record, 0, len(s.recs))
	for _, r := range s.recs {
		out = append(out, r)
	}
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b Record) int { return compareRefs(a.Ref, b.Ref) })
	return out
}

// Len is how many attachments are recorded.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.recs)
}

func compareRefs(a, b Ref) int {
	if c := strings.Compare(a.Network, b.Network); c != 0 {
		return c
	}
	if c := strings.Compare(a.ContainerID, b.ContainerID); c != 0 {
		return c
	}
	return strings.Compare(a.IfName, b.IfName)
}
