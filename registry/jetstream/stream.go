package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Stream defaults, matching the backend parameters.
const (
	DefaultStream    = "REGISTRATION"
	DefaultMaxAge    = 24 * time.Hour
	DefaultMarkerTTL = time.Minute
)

// StreamConfig is the shape of the stream that holds the entries.
type StreamConfig struct {
	// Name is the stream name; default REGISTRATION.
	Name string
	// Prefix is the subject prefix; the stream captures <Prefix>.>. Default
	// DefaultPrefix.
	Prefix string
	// Replicas is 1..5; default 1. Production runs 3.
	Replicas int
	// MaxAge expires every entry without a TTL of its own (and caps those with one,
	// except "never"); 0 keeps them until removed.
	MaxAge time.Duration
	// Memory keeps the stream in memory instead of on disk.
	Memory bool
	// MarkerTTL is how long a removal stays visible to watchers at least: the
	// lifetime of the server's subject delete markers, and the shortest lifetime of
	// the removal an Unregister publishes (which lives longer when the entry it
	// replaces could have; see removal.go). A watcher disconnected for longer re-reads
	// its state on reconnect. Default one minute; at least one second.
	MarkerTTL time.Duration
}

func (c StreamConfig) withDefaults() StreamConfig {
	if c.Name == "" {
		c.Name = DefaultStream
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.MarkerTTL == 0 {
		c.MarkerTTL = DefaultMarkerTTL
	}
	return c
}

func (c StreamConfig) validate() error {
	switch {
	case c.Name == "" || strings.ContainsAny(c.Name, " \t\r\n.*>/\\"):
		return fmt.Errorf("stream name %q: must be non-empty, without spaces, '.', '*', '>', '/' or '\\'", c.Name)
	case c.Replicas < 1 || c.Replicas > 5:
		return fmt.Errorf("replicas %d: must be 1..5", c.Replicas)
	case c.MaxAge < 0:
		return fmt.Errorf("max-age %s: must not be negative (0 means no limit)", c.MaxAge)
	case c.MarkerTTL < time.Second || c.MarkerTTL%time.Second != 0:
		return fmt.Errorf("marker-ttl %s: must be whole seconds, at least 1s", c.MarkerTTL)
	}
	_, err := NewSubjects(c.Prefix)
	return err
}

// jetstreamConfig is the stream configuration of a KV store built from a stream
// (docs/backends.md, "jetstream"): one message per subject with rollup, per-message TTLs under a
// stream-wide MaxAge, delete markers on expiry, direct get for lookups, and hard deletes
// refused (purge allowed) so history cannot be rewritten behind watchers' backs.
func (c StreamConfig) jetstreamConfig() jetstream.StreamConfig {
	storage := jetstream.FileStorage
	if c.Memory {
		storage = jetstream.MemoryStorage
	}
	return jetstream.StreamConfig{
		Name:                   c.Name,
		Description:            "Switchboard endpoint registrations (one message per endpoint subject)",
		Subjects:               []string{c.Prefix + ".>"},
		Retention:              jetstream.LimitsPolicy,
		Discard:                jetstream.DiscardOld,
		MaxMsgsPerSubject:      1,
		MaxAge:                 c.MaxAge,
		Storage:                storage,
		Replicas:               c.Replicas,
		AllowRollup:            true,
		DenyDelete:             true,
		DenyPurge:              false,
		AllowDirect:            true,
		AllowMsgTTL:            true,
		SubjectDeleteMarkerTTL: c.MarkerTTL,
	}
}

// over is got with the settings the registry owns set as c says, and every other
// setting (a byte limit, compression, a duplicate window, placement...) kept: init
// changes what the registry needs of another writer's stream, nothing else.
func (c StreamConfig) over(got jetstream.StreamConfig) jetstream.StreamConfig {
	want := c.jetstreamConfig()
	out := got
	out.Description, out.Subjects, out.Retention, out.Discard = want.Description, want.Subjects, want.Retention, want.Discard
	out.MaxMsgsPerSubject, out.MaxAge, out.Storage, out.Replicas = want.MaxMsgsPerSubject, want.MaxAge, want.Storage, want.Replicas
	out.AllowRollup, out.DenyDelete, out.DenyPurge, out.AllowDirect = want.AllowRollup, want.DenyDelete, want.DenyPurge, want.AllowDirect
	out.AllowMsgTTL, out.SubjectDeleteMarkerTTL = want.AllowMsgTTL, want.SubjectDeleteMarkerTTL
	return out
}

// EnsureStream creates the stream, or updates an existing one to cfg (replicas,
// max age and marker TTL can change; the server refuses a storage change), keeping
// the settings the registry does not own. It is what `switchboard registry init` runs.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg StreamConfig) (*jetstream.StreamInfo, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s, err := js.Stream(ctx, cfg.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		s, err = js.CreateStream(ctx, cfg.jetstreamConfig())
	case err == nil:
		s, err = js.UpdateStream(ctx, cfg.over(s.CachedInfo().Config))
	}
	if err != nil {
		return nil, fmt.Errorf("create or update stream %s: %w", cfg.Name, err)
	}
	return s.CachedInfo(), nil
}

// streamChanges names, in the server's JSON spelling, every setting that applying want
// changes on a stream configured as got, so that `registry init` over a stream
// someone else created says what it did to it.
func streamChanges(got, want jetstream.StreamConfig) []string {
	var out []string
	diff := func(name string, from, to any) {
		if f, t := fmt.Sprint(from), fmt.Sprint(to); f != t {
			out = append(out, fmt.Sprintf("%s: %s -> %s", name, f, t))
		}
	}
	diff("subjects", got.Subjects, want.Subjects)
	diff("retention", got.Retention, want.Retention)
	diff("discard", got.Discard, want.Discard)
	diff("max_msgs_per_subject", got.MaxMsgsPerSubject, want.MaxMsgsPerSubject)
	diff("max_age", got.MaxAge, want.MaxAge)
	diff("num_replicas", got.Replicas, want.Replicas)
	diff("storage", got.Storage, want.Storage)
	diff("allow_rollup_hdrs", got.AllowRollup, want.AllowRollup)
	diff("deny_delete", got.DenyDelete, want.DenyDelete)
	diff("deny_purge", got.DenyPurge, want.DenyPurge)
	diff("allow_direct", got.AllowDirect, want.AllowDirect)
	diff("allow_msg_ttl", got.AllowMsgTTL, want.AllowMsgTTL)
	diff("subject_delete_marker_ttl", got.SubjectDeleteMarkerTTL, want.SubjectDeleteMarkerTTL)
	diff("description", got.Description, want.Description)
	return out
}

// openStream checks that the stream exists with the settings the backend relies on,
// creating it when it is missing and create is set, and returns its configuration.
// An existing stream is never changed here: that would let any client resize a
// production stream.
func openStream(ctx context.Context, js jetstream.JetStream, cfg StreamConfig, create bool, lookup string) (jetstream.StreamConfig, error) {
	s, err := js.Stream(ctx, cfg.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) && create {
		if s, err = js.CreateStream(ctx, cfg.jetstreamConfig()); err != nil {
			return jetstream.StreamConfig{}, fmt.Errorf("create stream %s: %w", cfg.Name, err)
		}
		return s.CachedInfo().Config, nil
	}
	if err != nil {
		return jetstream.StreamConfig{}, fmt.Errorf("stream %s: %w", cfg.Name, err)
	}
	got := s.CachedInfo().Config
	return got, checkStream(got, cfg, lookup)
}

// checkStream names every setting of an existing stream that would break the KV
// semantics, so a misconfigured stream fails loudly at open instead of serving stale
// or duplicate entries. Direct get is needed only by the direct lookup: other writers
// create the stream without it, and everything else works on such a stream.
func checkStream(got jetstream.StreamConfig, want StreamConfig, lookup string) error {
	var bad []string
	if !coversSubject(got.Subjects, want.Prefix+".>") {
		bad = append(bad, fmt.Sprintf("subjects %v do not capture %s.>", got.Subjects, want.Prefix))
	}
	if got.MaxMsgsPerSubject != 1 {
		bad = append(bad, fmt.Sprintf("max messages per subject is %d, want 1", got.MaxMsgsPerSubject))
	}
	if !got.AllowRollup {
		bad = append(bad, "rollup is not allowed")
	}
	if !got.AllowMsgTTL {
		bad = append(bad, "per-message TTL is not allowed")
	}
	if got.SubjectDeleteMarkerTTL <= 0 {
		bad = append(bad, "subject delete markers are off")
	}
	if !got.AllowDirect && lookup == LookupDirect {
		bad = append(bad, "direct get is not allowed, which --"+ParamLookup+" "+LookupDirect+" needs")
	}
	if len(bad) > 0 {
		return fmt.Errorf("stream %s is not usable as a registration store: %s (run `switchboard registry init` to fix it)", got.Name, strings.Join(bad, "; "))
	}
	return nil
}

// coversSubject reports whether one of the stream's subjects is want or a wildcard
// that captures all of it.
func coversSubject(subjects []string, want string) bool {
	for _, s := range subjects {
		if s == want || s == ">" || (strings.HasSuffix(s, ".>") && strings.HasPrefix(want, strings.TrimSuffix(s, ">"))) {
			return true
		}
	}
	return false
}
