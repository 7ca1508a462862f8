package pods

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// Ref names one attachment as the CNI spec does: a container and one of its
// interfaces, on one network.
type Ref struct {
	Network     string `json:"network"`
	ContainerID string `json:"container_id"`
	IfName      string `json:"ifname"`
}

// PodRef names the Kubernetes pod behind an attachment, as CNI_ARGS did.
type PodRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// UID is empty when the runtime did not send K8S_POD_UID.
	UID string `json:"uid,omitempty"`
}

// String is namespace/name, how pods are named in logs.
func (p PodRef) String() string { return p.Namespace + "/" + p.Name }

// Record is one attachment the agent was told about by CNI ADD and not yet told to
// forget.
type Record struct {
	Ref   Ref    `json:"ref"`
	Pod   PodRef `json:"pod"`
	Netns string `json:"netns,omitempty"`
	// IPs are the pod's addresses on this attachment, in canonical form.
	IPs     []string  `json:"ips"`
	Created time.Time `json:"created"`
}

// ErrInvalid is matched (errors.Is) by every error about a record's or a request's
// content.
var ErrInvalid = errors.New("invalid attachment")

// FieldError says which field broke which rule; the server returns it as
// InvalidArgument, the store moves a file holding it aside.
type FieldError struct {
	Field string // e.g. "pod.name", "ips[1]"
	Value string
	Rule  string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s %q: %s", e.Field, truncate(e.Value), e.Rule)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// recordVersion is the file format's version. A file with another one is not
// guessed at: an agent that reads a newer agent's files moves them aside (and says so)
// rather than misreading them.
const recordVersion = 1

// maxRecordSize bounds a record file: a record is a few hundred bytes, and the
// decoder must not read an arbitrary file into memory.
const maxRecordSize = 64 << 10

// Bounds on the free-form strings, so a record always fits maxRecordSize.
const (
	maxRefLen   = 256
	maxUIDLen   = 128
	maxNetnsLen = 4096
	maxIPs      = 16
)

// recordFile is a record as it is stored: the version beside the record's fields.
type recordFile struct {
	Version int `json:"version"`
	Record
}

// EncodeRecord returns the file form of r.
func EncodeRecord(r Record) ([]byte, error) {
	b, err := json.Marshal(recordFile{Version: recordVersion, Record: r})
	if err != nil {
		return nil, fmt.Errorf("encode record: %w", err)
	}
	return append(b, '\n'), nil
}

// DecodeRecord parses a record file strictly: the version must be known, no field
// may be unknown, nothing may follow the object, and the record must pass the same
// rules an ADD request does. Addresses are returned in canonical form.
func DecodeRecord(b []byte) (Record, error) {
	if len(b) > maxRecordSize {
		return Record{}, fmt.Errorf("record of %d bytes: larger than %d", len(b), maxRecordSize)
	}
	var probe struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return Record{}, fmt.Errorf("decode record: %w", err)
	}
	if probe.Version == nil || *probe.Version != recordVersion {
		return Record{}, fmt.Errorf("record version %s: this agent reads version %d", versionString(probe.Version), recordVersion)
	}
	var f recordFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return Record{}, fmt.Errorf("decode record: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Record{}, errors.New("decode record: data after the record")
	}
	r := f.Record
	if err := r.normalize(); err != nil {
		return Record{}, err
	}
	if r.Created.IsZero() {
		return Record{}, &FieldError{"created", "", "is required"}
	}
	return r, nil
}

func versionString(v *int) string {
	if v == nil {
		return "missing"
	}
	return fmt.Sprint(*v)
}

// normalize validates r and puts its addresses in canonical form: the rules of an
// ADD request, applied again to every file read back.
func (r *Record) normalize() error {
	if err := r.Ref.validate("ref."); err != nil {
		return err
	}
	if err := r.Pod.validate(); err != nil {
		return err
	}
	if err := freeText("netns", r.Netns, maxNetnsLen); err != nil {
		return err
	}
	ips, err := canonicalIPs("ips", r.IPs)
	if err != nil {
		return err
	}
	r.IPs = ips
	return nil
}

// validate checks the attachment's names: required, bounded, printable. Their
// format is the runtime's business (a container id is whatever it chose); they only
// ever name a file through a hash.
func (ref Ref) validate(prefix string) error {
	for _, f := range [...]struct{ name, value string }{
		{"network", ref.Network}, {"container_id", ref.ContainerID}, {"ifname", ref.IfName},
	} {
		if f.value == "" {
			return &FieldError{prefix + f.name, "", "is required"}
		}
		if err := freeText(prefix+f.name, f.value, maxRefLen); err != nil {
			return err
		}
	}
	return nil
}

// validate checks the pod's names by Kubernetes' rules: a namespace is a DNS-1123
// label, a pod name a DNS-1123 subdomain. A name the API server could not hold can
// never be matched to a pod, so it is refused at ADD rather than recorded.
func (p PodRef) validate() error {
	if p.Namespace == "" {
		return &FieldError{"pod.namespace", "", "is required"}
	}
	if errs := validation.IsDNS1123Label(p.Namespace); len(errs) > 0 {
		return &FieldError{"pod.namespace", p.Namespace, strings.Join(errs, "; ")}
	}
	if p.Name == "" {
		return &FieldError{"pod.name", "", "is required"}
	}
	if errs := validation.IsDNS1123Subdomain(p.Name); len(errs) > 0 {
		return &FieldError{"pod.name", p.Name, strings.Join(errs, "; ")}
	}
	if strings.ContainsRune(p.UID, ' ') {
		return &FieldError{"pod.uid", p.UID, "must not contain spaces"}
	}
	return freeText("pod.uid", p.UID, maxUIDLen)
}

// freeText checks a string that is stored and logged but never parsed: valid UTF-8,
// no control characters (they would forge log lines), at most limit bytes.
func freeText(field, v string, limit int) error {
	switch {
	case len(v) > limit:
		return &FieldError{field, v, fmt.Sprintf("must be at most %d bytes", limit)}
	case !utf8.ValidString(v):
		return &FieldError{field, v, "must be valid UTF-8"}
	case endpoint.HasControl(v):
		return &FieldError{field, v, "must not contain control characters"}
	}
	return nil
}

// canonicalIPs parses every address (no prefix length, no zone), drops repeats and
// returns them in canonical form, the form endpoints are keyed by. At least one is
// required: an attachment without an address registers nothing.
func canonicalIPs(field string, ips []string) ([]string, error) {
	if len(ips) == 0 {
		return nil, &FieldError{field, "", "at least one address is required"}
	}
	if len(ips) > maxIPs {
		return nil, &FieldError{field, fmt.Sprintf("%d addresses", len(ips)), fmt.Sprintf("at most %d are allowed", maxIPs)}
	}
	out := make([]string, 0, len(ips))
	seen := make(map[netip.Addr]bool, len(ips))
	for i, s := range ips {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return nil, &FieldError{fmt.Sprintf("%s[%d]", field, i), s, "must be an IPv4 or IPv6 address without prefix length or zone"}
		}
		if !seen[a] {
			seen[a] = true
			out = append(out, a.String())
		}
	}
	return out, nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
