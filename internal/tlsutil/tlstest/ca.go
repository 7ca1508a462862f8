// Package tlstest is what tests need to exercise Switchboard's TLS links for real: a
// throw-away CA that issues SVID-shaped certificates, and a SPIFFE Workload API server
// that hands them out over a unix socket the way a SPIRE agent does. Production code
// is in internal/tlsutil; nothing here is for use outside tests and local setups.
package tlstest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/switchboard-mesh/switchboard/internal/tlsutil"
)

// CA is a throw-away certificate authority for tests and local setups: it issues
// SVID-shaped leaf certificates (one spiffe:// URI SAN) on the fly.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// PEM is the CA certificate, the trust bundle peers verify against.
	PEM []byte
}

// Leaf is an issued certificate and its key.
type Leaf struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
	KeyPEM  []byte
}

// NewCA makes a CA valid for a day.
func NewCA(name string) (*CA, error) { return newCA(name, nil) }

// NewCAWithID makes a CA like NewCA whose certificate also carries id as its URI
// SAN, as a SPIRE CA carries its trust domain's ID (spiffe://example.org).
func NewCAWithID(name, id string) (*CA, error) {
	u, err := url.Parse(id)
	if err != nil {
		return nil, fmt.Errorf("CA id %q: %w", id, err)
	}
	return newCA(name, []*url.URL{u})
}

func newCA(name string, uris []*url.URL) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		URIs:                  uris,
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Issue signs a leaf for both client and server use. spiffeID, when set, becomes the
// URI SAN (spiffe://domain/path); hosts become DNS or IP SANs.
func (ca *CA) Issue(spiffeID string, hosts ...string) (*Leaf, error) {
	n := Names{CommonName: "switchboard test leaf"}
	if spiffeID != "" {
		n.URIs = []string{spiffeID}
	}
	for _, h := range hosts {
		if net.ParseIP(h) != nil {
			n.IPs = append(n.IPs, h)
		} else {
			n.DNSNames = append(n.DNSNames, h)
		}
	}
	return ca.IssueNames(n)
}

// Names are the names IssueNames puts in a leaf, and the only ones it puts there.
type Names struct {
	CommonName string
	URIs       []string // URI SANs, e.g. spiffe://example.org/agent/node-1
	DNSNames   []string
	IPs        []string
}

// IssueNames signs a leaf for both client and server use that carries exactly the
// names n: for tests of how a peer's names are read.
func (ca *CA) IssueNames(n Names) (*Leaf, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: n.CommonName},
		DNSNames:     n.DNSNames,
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, s := range n.URIs {
		u, err := url.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("URI SAN %q: %w", s, err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	for _, s := range n.IPs {
		ip := net.ParseIP(s)
		if ip == nil {
			return nil, fmt.Errorf("IP SAN %q: not an IP address", s)
		}
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, fmt.Errorf("issue certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &Leaf{
		Cert: cert, Key: key,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}),
	}, nil
}

// WriteFiles writes the CA bundle and the leaf as dir/ca.pem, dir/<name>.pem and
// dir/<name>-key.pem.
func (ca *CA) WriteFiles(dir, name string, leaf *Leaf) (tlsutil.Files, error) {
	f := tlsutil.Files{
		CA:   filepath.Join(dir, "ca.pem"),
		Cert: filepath.Join(dir, name+".pem"),
		Key:  filepath.Join(dir, name+"-key.pem"),
	}
	for path, data := range map[string][]byte{f.CA: ca.PEM, f.Cert: leaf.CertPEM, f.Key: leaf.KeyPEM} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return tlsutil.Files{}, err
		}
	}
	return f, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n
}
