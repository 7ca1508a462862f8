package jetstream

import (
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strings"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// DefaultPrefix is the subject prefix entries live under unless configured otherwise.
const DefaultPrefix = "switchboard.registration.v1"

// Subjects maps endpoints to subjects of the form
// <prefix>.<cluster>.<protocol>.<service>.<address>.<instance id> and back.
type Subjects struct {
	prefix string
}

// NewSubjects checks the prefix: dot-separated tokens without spaces or wildcards.
func NewSubjects(prefix string) (Subjects, error) {
	if prefix == "" {
		return Subjects{}, fmt.Errorf("subject prefix is empty")
	}
	for _, tok := range strings.Split(prefix, ".") {
		if tok == "" || strings.ContainsAny(tok, " \t\r\n*>") {
			return Subjects{}, fmt.Errorf("subject prefix %q: tokens must be non-empty, without spaces or the wildcards * and >", prefix)
		}
	}
	return Subjects{prefix: prefix}, nil
}

// Prefix returns the prefix.
func (s Subjects) Prefix() string { return s.prefix }

// All is the wildcard subject that captures every entry: the stream's subject.
func (s Subjects) All() string { return s.prefix + ".>" }

// For returns the subject of the entry with key k: the one the backend writes.
func (s Subjects) For(k endpoint.Key) string {
	var buf [128]byte
	return string(s.appendFor(buf[:0], k, false, k.InstanceID()))
}

// Forms returns every subject an entry with key k may sit on, For(k) first. Other
// writers and earlier versions of this backend spell some keys differently: an IPv6
// address with ':' as '-' (earlier versions), a port of 0 as a null port, whose id
// hashes the text fmt prints for a nil %d operand. An unregister clears them all.
func (s Subjects) Forms(k endpoint.Key) []string {
	out := []string{s.For(k)}
	ids := []string{k.InstanceID()}
	if k.Port == 0 {
		ids = append(ids, nullPortID(k))
	}
	for _, legacy := range []bool{false, true} {
		for _, id := range ids {
			if subj := string(s.appendFor(nil, k, legacy, id)); !slices.Contains(out, subj) {
				out = append(out, subj)
			}
		}
	}
	return out
}

// nullPort is what fmt prints for a nil %d operand, which is what another writer
// (CCM) hashes in place of a null port.
const nullPort = "%!d(<nil>)"

// nullPortID is the id token of an entry written with a null port: FNV-1a 64 over
// cluster, service, protocol and address, then nullPort in place of the port.
func nullPortID(k endpoint.Key) string {
	h := fnv.New64a()
	for _, s := range [...]string{k.Cluster, k.Service, k.Protocol, k.Address, nullPort} {
		h.Write([]byte(s))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// holds reports whether subject may carry the entry with key k: its cluster,
// protocol, service and address tokens are k's (the address in either spelling) and
// one id token follows. The id token is trusted, not recomputed: another writer's
// id for a null port, say, hashes something the payload does not say. It does not
// allocate: readers check it for every message.
func (s Subjects) holds(subject string, k endpoint.Key) bool {
	for _, legacy := range [...]bool{false, true} {
		var buf [128]byte
		head := s.appendFor(buf[:0], k, legacy, "")
		// Compared without converting head to a string, which allocated once per
		// entry a lookup read (heads are longer than the compiler's stack buffer).
		if len(subject) > len(head) && subject[:len(head)] == string(head) && !strings.Contains(subject[len(head):], ".") {
			return true
		}
		if !strings.Contains(k.Address, ":") {
			return false // one spelling only
		}
	}
	return false
}

func (s Subjects) appendFor(b []byte, k endpoint.Key, legacy bool, id string) []byte {
	for _, tok := range [...]string{s.prefix, k.Cluster, k.Protocol, k.Service} {
		b = append(b, tok...)
		b = append(b, '.')
	}
	for i := 0; i < len(k.Address); i++ {
		switch c := k.Address[i]; {
		case c == '.':
			b = append(b, '_')
		case c == ':' && legacy:
			b = append(b, '-')
		default:
			b = append(b, c)
		}
	}
	b = append(b, '.')
	return append(b, id...)
}

// Filters returns the subjects that together match exactly the entries f selects:
// each unset field becomes the single-token wildcard. An IPv6 address has two
// spellings, so it yields two subjects. f must be valid (Filter.Validate).
func (s Subjects) Filters(f endpoint.Filter) []string {
	f = f.Normalize()
	out := []string{s.filter(f, AddressToken)}
	if strings.Contains(f.Address, ":") {
		out = append(out, s.filter(f, legacyEncoder.Replace))
	}
	return out
}

// consumerFilters is Filters for a consumer's read: for the empty filter, the
// stream's own subject, prefix.>. A consumer filtered on exactly its stream's subject
// is unfiltered for the server, which then walks the stream (one message per subject)
// instead of matching every message's subject against prefix.*.*.*.*.*: that matching
// was a fifth of a full lookup's CPU, the server's and ours together
// (docs/benchmarks/jetstream.md), and a NATS KV watch of everything does not pay it.
// prefix.> also delivers subjects of other shapes; readers skip those (entryShaped).
func (s Subjects) consumerFilters(f endpoint.Filter) []string {
	if f.Normalize() == (endpoint.Filter{}) {
		return []string{s.prefix + ".>"}
	}
	return s.Filters(f)
}

// entryShaped reports whether subject is prefix.<5 tokens>, as Filters matches for
// the empty filter (NATS subjects have no empty tokens).
func (s Subjects) entryShaped(subject string) bool {
	p := len(s.prefix)
	return len(subject) > p && subject[p] == '.' && subject[:p] == s.prefix && strings.Count(subject[p+1:], ".") == 4
}

// Filter returns one subject that matches every entry f selects: the address is a
// wildcard when it has more than one spelling, so a reader that cannot pass
// several subjects must check the address of what it reads. f must be valid.
func (s Subjects) Filter(f endpoint.Filter) string {
	f = f.Normalize()
	if strings.Contains(f.Address, ":") {
		f.Address = ""
	}
	return s.filter(f, AddressToken)
}

func (s Subjects) filter(f endpoint.Filter, enc func(string) string) string {
	tok := func(v string) string {
		if v == "" {
			return "*"
		}
		return v
	}
	addr := "*"
	if f.Address != "" {
		addr = enc(f.Address)
	}
	return strings.Join([]string{s.prefix, tok(f.Cluster), tok(f.Protocol), tok(f.Service), addr, "*"}, ".")
}

// SubjectKey is what a subject says about its entry: every key field but the port,
// which only the instance id (a hash) covers.
type SubjectKey struct {
	Cluster, Protocol, Service, Address, InstanceID string
}

// Matches reports whether k is the key this subject was built from.
func (sk SubjectKey) Matches(k endpoint.Key) bool {
	return sk.Cluster == k.Cluster && sk.Protocol == k.Protocol && sk.Service == k.Service &&
		sk.Address == k.Address && sk.InstanceID == k.InstanceID()
}

// Parse reads an entry subject. The error names the token that is wrong.
func (s Subjects) Parse(subject string) (SubjectKey, error) {
	rest, ok := strings.CutPrefix(subject, s.prefix+".")
	if !ok {
		return SubjectKey{}, fmt.Errorf("subject %q: not under prefix %q", subject, s.prefix)
	}
	toks := strings.Split(rest, ".")
	if len(toks) != 5 {
		return SubjectKey{}, fmt.Errorf("subject %q: want 5 tokens after the prefix (cluster.protocol.service.address.id), got %d", subject, len(toks))
	}
	sk := SubjectKey{Cluster: toks[0], Protocol: toks[1], Service: toks[2], InstanceID: toks[4]}
	for _, f := range [...]struct{ name, v string }{{"cluster", sk.Cluster}, {"protocol", sk.Protocol}, {"service", sk.Service}} {
		if err := endpoint.ValidateName(f.name, f.v); err != nil {
			return SubjectKey{}, fmt.Errorf("subject %q: %w", subject, err)
		}
	}
	addr, err := ParseAddressToken(toks[3])
	if err != nil {
		return SubjectKey{}, fmt.Errorf("subject %q: %w", subject, err)
	}
	sk.Address = addr
	if !isInstanceID(sk.InstanceID) {
		return SubjectKey{}, fmt.Errorf("subject %q: instance id %q: want 16 lower-case hex digits", subject, sk.InstanceID)
	}
	return sk, nil
}

func isInstanceID(s string) bool {
	if len(s) != 16 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// AddressToken encodes a canonical IP address as one subject token the way the
// registration spec does: '.' becomes '_' (10.0.0.1 is 10_0_0_1) and nothing else
// changes, so an IPv6 address keeps its colons (2001:db8::1), which NATS subjects
// allow. The token holds no dot, space or wildcard.
func AddressToken(addr string) string {
	return strings.ReplaceAll(addr, ".", "_")
}

// ParseAddressToken reverses AddressToken, and for a token without colons also the
// spelling earlier versions of this backend wrote (':' as '-' as well: 2001-db8--1).
// It accepts only canonical addresses, so every address has exactly one subject per
// spelling.
func ParseAddressToken(tok string) (string, error) {
	if strings.Contains(tok, ".") {
		return "", fmt.Errorf("address token %q: holds '.', which the encoding replaces", tok)
	}
	if strings.Contains(tok, ":") && strings.Contains(tok, "-") {
		return "", fmt.Errorf("address token %q: mixes ':' and '-'", tok)
	}
	s := legacyDecoder.Replace(tok)
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		return "", fmt.Errorf("address token %q: not an encoded IPv4 or IPv6 address", tok)
	case a.Zone() != "" || a.String() != s:
		return "", fmt.Errorf("address token %q: not the canonical encoding (want %q)", tok, AddressToken(a.WithZone("").String()))
	}
	return s, nil
}

// The spelling of earlier versions, read and removed but never written.
var (
	legacyEncoder = strings.NewReplacer(".", "_", ":", "-")
	legacyDecoder = strings.NewReplacer("_", ".", "-", ":")
)
