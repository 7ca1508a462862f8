package config

import (
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"
)

// IdentityKind is the certificate field an identity is read from. Each kind matches
// its own field only, so a URI SAN spelled "dns:NAME" is never taken for the DNS
// SAN NAME, nor a common name for either.
type IdentityKind uint8

// Identity kinds, as the authorization section spells them.
const (
	// IdentityURI is a URI SAN (a SPIFFE ID): written as the URI itself when it has
	// the form scheme://host…, else as "uri:" and the URI.
	IdentityURI IdentityKind = iota + 1
	// IdentityDNS is a DNS SAN: "dns:NAME".
	IdentityDNS
	// IdentityCN is the subject's common name: "cn:NAME".
	IdentityCN
)

// Identity is one name of a client certificate, with the field it comes from.
type Identity struct {
	Kind IdentityKind
	Name string
}

// ParseIdentity reads an identity as the authorization section writes it:
// "dns:NAME", "cn:NAME", "uri:URI", or a URI of the form scheme://host… (a SPIFFE
// ID). String writes it back.
func ParseIdentity(s string) (Identity, error) {
	kind, name, ok := strings.Cut(s, ":")
	switch {
	case !ok, !utf8.ValidString(s): // a YAML file holds UTF-8 only
	case kind == "dns" || kind == "cn":
		if name != "" && strings.TrimSpace(name) == name {
			return Identity{Kind: map[string]IdentityKind{"dns": IdentityDNS, "cn": IdentityCN}[kind], Name: name}, nil
		}
	case kind == "uri":
		if isURI(name) {
			return Identity{Kind: IdentityURI, Name: name}, nil
		}
	case strings.HasPrefix(name, "//"):
		if u, err := url.Parse(s); err == nil && u.Scheme != "" && u.Host != "" {
			return Identity{Kind: IdentityURI, Name: s}, nil
		}
	}
	return Identity{}, fmt.Errorf("%q is not an identity: want a URI SAN such as spiffe://example.org/ops, dns:NAME or cn:NAME", s)
}

// isURI accepts what a certificate's URI SAN can hold: a URI with a scheme.
func isURI(s string) bool {
	u, err := url.Parse(s)
	return err == nil && u.Scheme != "" && strings.TrimSpace(s) == s
}

// String is the identity as the authorization section writes it; ParseIdentity
// reads it back as the same identity, so logs never show one kind as another.
func (id Identity) String() string {
	switch id.Kind {
	case IdentityDNS:
		return "dns:" + id.Name
	case IdentityCN:
		return "cn:" + id.Name
	case IdentityURI:
		if p, err := ParseIdentity(id.Name); err == nil && p == id {
			return id.Name
		}
		return "uri:" + id.Name
	}
	return fmt.Sprintf("unknown(%d):%s", id.Kind, id.Name)
}

// ValidIdentity checks a client-certificate identity as the authorization section
// writes it (ParseIdentity).
func ValidIdentity(id string) error {
	_, err := ParseIdentity(id)
	return err
}
