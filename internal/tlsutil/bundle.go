package tlsutil

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
)

// ErrNoTrustDomain is returned by BundleTrustDomain when no certificate of the
// bundle carries a SPIFFE ID.
var ErrNoTrustDomain = errors.New("no CA certificate carries a SPIFFE ID")

// BundleTrustDomain is the trust domain the CA certificates of the PEM bundle at
// path name in their SPIFFE ID (a SPIRE CA carries spiffe://example.org, say). It is
// an error when none names one (ErrNoTrustDomain) or when they name several.
func BundleTrustDomain(path string) (spiffeid.TrustDomain, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return spiffeid.TrustDomain{}, fmt.Errorf("tls: read CA bundle: %w", err)
	}
	var names []string
	for block, rest := pem.Decode(raw); block != nil; block, rest = pem.Decode(rest) {
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return spiffeid.TrustDomain{}, fmt.Errorf("tls: CA bundle %s: %w", path, err)
		}
		if id, err := x509svid.IDFromCert(c); err == nil && !slices.Contains(names, id.TrustDomain().Name()) {
			names = append(names, id.TrustDomain().Name())
		}
	}
	switch len(names) {
	case 0:
		return spiffeid.TrustDomain{}, fmt.Errorf("tls: CA bundle %s: %w", path, ErrNoTrustDomain)
	case 1:
		return spiffeid.TrustDomainFromString(names[0])
	}
	return spiffeid.TrustDomain{}, fmt.Errorf("tls: CA bundle %s names several trust domains (%s)", path, strings.Join(names, ", "))
}
