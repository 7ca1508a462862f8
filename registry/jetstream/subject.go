package jetstream

import (
	"fmt"
	"net/netip"
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

// For returns the subject of the entry with key k.
func (s Subjects) For(k endpoint.Key) string {
	var buf [128]byte
	return string(s.appendFor(buf[:0], k))
}

// owns reports whether subject is the subject of k, without allocating: readers check
// it for every message.
func (s Subjects) owns(subject string, k endpoint.Key) bool {
	var buf [128]byte
	return string(s.appendFor(buf[:0], k)) == subject
}

func (s Subjects) appendFor(b []byte, k endpoint.Key) []byte {
	for _, tok := range [...]string{s.prefix, k.Cluster, k.Protocol, k.Service} {
		b = append(b, tok...)
		b = append(b, '.')
	}
	for i := 0; i < len(k.Address); i++ {
		switch c := k.Address[i]; c {
		case '.':
			b = append(b, '_')
		case ':':
			b = append(b, '-')
		default:
			b = append(b, c)
		}
	}
	b = append(b, '.')
	return append(b, k.InstanceID()...)
}

// Filter returns the subject that matches exactly the entries f selects: each unset
// field becomes the single-token wildcard. f must be valid (Filter.Validate).
func (s Subjects) Filter(f endpoint.Filter) string {
	f = f.Normalize()
	tok := func(v string) string {
		if v == "" {
			return "*"
		}
		return v
	}
	addr := "*"
	if f.Address != "" {
		addr = AddressToken(f.Address)
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

// AddressToken encodes a canonical IP address as one subject token: '.' becomes '_'
// (so 10.0.0.1 is 10_0_0_1, as the spec asks) and ':' becomes '-' (so 2001:db8::1 is
// 2001-db8--1). Neither replacement occurs in a canonical address, so the mapping is
// reversible, and the token holds no dot, space or wildcard. ':' is legal in NATS
// subjects but not in KV keys or many tools' subject filters, hence '-'.
func AddressToken(addr string) string {
	return addrEncoder.Replace(addr)
}

// ParseAddressToken reverses AddressToken and accepts only tokens that AddressToken
// produces, so every address has exactly one subject.
func ParseAddressToken(tok string) (string, error) {
	if strings.ContainsAny(tok, ".:") {
		return "", fmt.Errorf("address token %q: holds '.' or ':', which the encoding replaces", tok)
	}
	s := addrDecoder.Replace(tok)
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		return "", fmt.Errorf("address token %q: not an encoded IPv4 or IPv6 address", tok)
	case a.Zone() != "" || a.String() != s:
		return "", fmt.Errorf("address token %q: not the canonical encoding (want %q)", tok, AddressToken(a.WithZone("").String()))
	}
	return s, nil
}

var (
	addrEncoder = strings.NewReplacer(".", "_", ":", "-")
	addrDecoder = strings.NewReplacer("_", ".", "-", ":")
)
