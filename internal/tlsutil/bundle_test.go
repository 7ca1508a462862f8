package tlsutil_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchboard-mesh/switchboard/internal/tlsutil"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil/tlstest"
)

// A CA bundle names a trust domain when its SPIFFE CA certificates all carry one.
func TestBundleTrustDomain(t *testing.T) {
	ca := func(id string) []byte {
		c, err := tlstest.NewCAWithID("CA", id)
		if err != nil {
			t.Fatal(err)
		}
		return c.PEM
	}
	plain, err := tlstest.NewCA("plain CA")
	if err != nil {
		t.Fatal(err)
	}
	bundle := func(pems ...[]byte) string {
		path := filepath.Join(t.TempDir(), "ca.pem")
		if err := os.WriteFile(path, bytes.Join(pems, nil), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	td, err := tlsutil.BundleTrustDomain(bundle(plain.PEM, ca("spiffe://example.org"), ca("spiffe://example.org")))
	if err != nil || td.Name() != "example.org" {
		t.Fatalf("bundle of example.org: %q, %v", td, err)
	}
	if _, err := tlsutil.BundleTrustDomain(bundle(plain.PEM)); !errors.Is(err, tlsutil.ErrNoTrustDomain) {
		t.Fatalf("bundle without a SPIFFE ID: %v, want ErrNoTrustDomain", err)
	}
	if _, err := tlsutil.BundleTrustDomain(bundle(ca("spiffe://example.org"), ca("spiffe://other.org"))); err == nil || !strings.Contains(err.Error(), "several trust domains") {
		t.Fatalf("bundle of two trust domains: %v", err)
	}
}
