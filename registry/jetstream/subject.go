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

// Forms returns every subject an entry with key k may sit on that k alone says, For(k)
// first. Other writers and earlier versions of this backend spell some keys
// differently: an IPv6 address with ':' as '-' (earlier versions), a port of 0 as a
// null port, whose id hashes the text fmt prints for a nil %d operand. An unregister
// clears them all, and also the subjects on which another writer spelled an IPv6
// address otherwise (2001:DB8::1), which only a read of the stream finds (OtherSpelling).
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
// protocol, service and address tokens are k's and one id token follows. The address
// token may spell k's address any way (decodeAddressToken): another writer keeps an
// IPv6 address as it was written (2001:DB8::1 for 2001:db8::1). The id token is
// trusted, not recomputed: another writer's id for a null port, say, hashes something
// the payload does not say. It does not allocate for the subjects this backend writes,
// the canonical spelling and that of earlier versions: readers check it for every
// message.
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
	// Another spelling of an IPv6 address: only another writer's entries, and
	// payloads on a subject not their own, come this far.
	var buf [128]byte
	head := s.appendHead(buf[:0], k)
	if len(subject) <= len(head) || subject[:len(head)] != string(head) {
		return false
	}
	tok, id, ok := strings.Cut(subject[len(head):], ".")
	if !ok || id == "" || strings.Contains(id, ".") {
		return false
	}
	_, a, err := decodeAddressToken(tok)
	return err == nil && sameAddress(a, k.Address)
}

// sameAddress reports whether a is the canonical address canon, without allocating.
func sameAddress(a netip.Addr, canon string) bool {
	var buf [64]byte
	return string(a.AppendTo(buf[:0])) == canon
}

// appendHead appends the subject of k up to its address token: prefix.cluster.protocol.service.
func (s Subjects) appendHead(b []byte, k endpoint.Key) []byte {
	for _, tok := range [...]string{s.prefix, k.Cluster, k.Protocol, k.Service} {
		b = append(b, tok...)
		b = append(b, '.')
	}
	return b
}

func (s Subjects) appendFor(b []byte, k endpoint.Key, legacy bool, id string) []byte {
	b = s.appendHead(b, k)
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

// Filters returns the subjects that together match every entry f selects: each
// unset field becomes the single-token wildcard. An IPv6 address has many spellings
// (another writer keeps it as written: 2001:DB8::1), so its position is a wildcard
// too, and the reader keeps only the subjects whose address token spells it
// (AddressCheck). f must be valid (Filter.Validate).
func (s Subjects) Filters(f endpoint.Filter) []string {
	return []string{s.Filter(f)}
}

// AddressCheck returns, for a filter on an IPv6 address, a test of whether a subject
// matching Filters(f) spells that address in its address token; nil for every other
// filter, whose subject filter is exact. Subjects in the two spellings this backend
// writes are told apart by comparing strings; only other spellings are parsed.
func (s Subjects) AddressCheck(f endpoint.Filter) func(subject string) bool {
	addr := f.Normalize().Address
	if !strings.Contains(addr, ":") {
		return nil
	}
	want, err := netip.ParseAddr(addr)
	if err != nil || want.Zone() != "" {
		return func(string) bool { return false } // no entry has such an address
	}
	tok, legacy := AddressToken(addr), legacyEncoder.Replace(addr)
	return func(subject string) bool {
		t, ok := s.addressTokenOf(subject)
		switch {
		case !ok:
			return false
		case t == tok || t == legacy:
			return true
		case !strings.ContainsAny(t, ":-"):
			return false // an IPv4 address
		}
		_, a, err := decodeAddressToken(t)
		return err == nil && a == want
	}
}

// addressTokenOf returns the address token of an entry subject (entryShaped).
func (s Subjects) addressTokenOf(subject string) (string, bool) {
	if !s.entryShaped(subject) {
		return "", false
	}
	rest := subject[len(s.prefix)+1:]
	for range 3 {
		rest = rest[strings.IndexByte(rest, '.')+1:]
	}
	return rest[:strings.IndexByte(rest, '.')], true
}

// consumerFilters is Filters for a consumer's read: for the empty filter, the
// stream's own subject, prefix.>. A consumer filtered on exactly its stream's subject
// is unfiltered for the server, which then walks the stream (one message per subject)
// instead of matching every message's subject against prefix.*.*.*.*.*: that matching
// was a fifth of a full lookup's CPU, the server's and ours together
// (docs/benchmarks/jetstream.md), and a NATS KV watch of everything does not pay it.
// prefix.> also delivers subjects of other shapes; readers skip those (entryShaped).
// A filter on an IPv6 address alone reads the same way: its subject filter is five
// wildcards too (Filters), and the reader checks each subject's address token.
func (s Subjects) consumerFilters(f endpoint.Filter) []string {
	if s.readsAll(f) {
		return []string{s.prefix + ".>"}
	}
	return s.Filters(f)
}

// readsAll reports whether f's subject filter matches every entry subject: f sets
// nothing, or only an IPv6 address (Filters).
func (s Subjects) readsAll(f endpoint.Filter) bool {
	f = f.Normalize()
	return f.Cluster == "" && f.Protocol == "" && f.Service == "" && (f.Address == "" || strings.Contains(f.Address, ":"))
}

// entryShaped reports whether subject is prefix.<5 tokens>, as Filters matches for
// the empty filter (NATS subjects have no empty tokens).
func (s Subjects) entryShaped(subject string) bool {
	p := len(s.prefix)
	return len(subject) > p && subject[p] == '.' && subject[:p] == s.prefix && strings.Count(subject[p+1:], ".") == 4
}

// Filter returns the one subject that matches every entry f selects (Filters). f
// must be valid.
func (s Subjects) Filter(f endpoint.Filter) string {
	f = f.Normalize()
	tok := func(v string) string {
		if v == "" {
			return "*"
		}
		return v
	}
	addr := "*"
	if f.Address != "" && !strings.Contains(f.Address, ":") {
		addr = AddressToken(f.Address)
	}
	return strings.Join([]string{s.prefix, tok(f.Cluster), tok(f.Protocol), tok(f.Service), addr, "*"}, ".")
}

// SubjectKey is what a subject says about its entry: every key field but the port,
// which only the instance id (a hash) covers.
type SubjectKey struct {
	Cluster, Protocol, Service string
	// Address is the address in canonical form; Written is the address as the
	// subject spells it, decoded ('_' back to '.', and in the spelling of earlier
	// versions '-' back to ':'): 2001:DB8::1 where another writer kept it so. Its
	// id token hashes Written.
	Address, Written string
	InstanceID       string
}

// Canonical reports whether the subject spells its address as this backend does, in
// the current spelling or that of earlier versions.
func (sk SubjectKey) Canonical() bool { return sk.Written == sk.Address }

// Matches reports whether k is the key this subject was built from: k's fields, and
// an id that hashes them with the address as the subject spells it.
func (sk SubjectKey) Matches(k endpoint.Key) bool {
	return sk.sameEntry(k) && sk.InstanceID == sk.written(k).InstanceID()
}

// formOf reports whether an entry with key k may sit on this subject and an
// unregister of k clears it (Forms, OtherSpelling): Matches, or with a port of 0 the
// id of a null port.
func (sk SubjectKey) formOf(k endpoint.Key) bool {
	return sk.sameEntry(k) && (sk.InstanceID == sk.written(k).InstanceID() ||
		k.Port == 0 && sk.InstanceID == nullPortID(sk.written(k)))
}

func (sk SubjectKey) sameEntry(k endpoint.Key) bool {
	return sk.Cluster == k.Cluster && sk.Protocol == k.Protocol && sk.Service == k.Service && sk.Address == k.Address
}

// written is k with its address spelled as in the subject, as its id hashes it.
func (sk SubjectKey) written(k endpoint.Key) endpoint.Key {
	k.Address = sk.Written
	return k
}

// OtherSpelling reports whether subject is one on which another writer stored the
// entry with key k under another spelling of its IPv6 address (2001:DB8::1 for
// 2001:db8::1), with the id that writer hashes from the address as written: an
// unregister of k clears it besides Forms(k). Forms(k) are never other spellings.
func (s Subjects) OtherSpelling(subject string, k endpoint.Key) bool {
	if !strings.Contains(k.Address, ":") {
		return false
	}
	sk, err := s.Parse(subject)
	return err == nil && !sk.Canonical() && sk.formOf(k)
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
	written, a, err := decodeAddressToken(toks[3])
	if err != nil {
		return SubjectKey{}, fmt.Errorf("subject %q: %w", subject, err)
	}
	sk.Written, sk.Address = written, written
	if !sameAddress(a, written) {
		sk.Address = a.String()
	}
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
// spelling earlier versions of this backend wrote (':' as '-' as well: 2001-db8--1),
// and returns the address in canonical form. Read liberally: the token may spell the
// address any way netip reads it (2001:DB8::1, 2001:0db8:0:0::1), as another writer
// that keeps addresses as written does, so one address has many tokens; AddressToken
// of the result is the one this backend writes.
func ParseAddressToken(tok string) (string, error) {
	written, a, err := decodeAddressToken(tok)
	if err != nil {
		return "", err
	}
	if sameAddress(a, written) {
		return written, nil
	}
	return a.String(), nil
}

// decodeAddressToken decodes an address token in either spelling: the address as
// its writer spelled it, and that address.
func decodeAddressToken(tok string) (string, netip.Addr, error) {
	if strings.Contains(tok, ".") {
		return "", netip.Addr{}, fmt.Errorf("address token %q: holds '.', which the encoding replaces", tok)
	}
	if strings.Contains(tok, ":") && strings.Contains(tok, "-") {
		return "", netip.Addr{}, fmt.Errorf("address token %q: mixes ':' and '-'", tok)
	}
	written := legacyDecoder.Replace(tok)
	a, err := netip.ParseAddr(written)
	switch {
	case err != nil:
		return "", netip.Addr{}, fmt.Errorf("address token %q: not an encoded IPv4 or IPv6 address", tok)
	case a.Zone() != "":
		return "", netip.Addr{}, fmt.Errorf("address token %q: carries an IPv6 zone", tok)
	}
	return written, a, nil
}

// The spelling of earlier versions, read and removed but never written.
var (
	legacyEncoder = strings.NewReplacer(".", "_", ":", "-")
	legacyDecoder = strings.NewReplacer("_", ".", "-", ":")
)
