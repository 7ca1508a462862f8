package kubetest

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
)

// credentials are the files kube-apiserver is started with and the admin token
// clients use.
type credentials struct {
	dir       string
	certDir   string // the server writes its self-signed apiserver.crt here
	saKey     string // RSA private key: signs and verifies service-account tokens
	tokenFile string // static tokens: one admin in system:masters
	token     string
}

// writeCredentials creates the key and token files in dir.
func writeCredentials(dir string) (*credentials, error) {
	c := &credentials{
		dir:       dir,
		certDir:   filepath.Join(dir, "certs"),
		saKey:     filepath.Join(dir, "sa.key"),
		tokenFile: filepath.Join(dir, "tokens.csv"),
	}
	if err := writeServiceAccountKey(c.saKey); err != nil {
		return nil, err
	}
	token, err := randomToken()
	if err != nil {
		return nil, err
	}
	c.token = token
	// Format: token,user,uid,"group1,group2". system:masters bypasses RBAC, so
	// the admin can also grant narrower roles to the identities tests exercise.
	line := fmt.Sprintf("%s,kubetest-admin,kubetest-admin,\"system:masters\"\n", token)
	if err := os.WriteFile(c.tokenFile, []byte(line), 0o600); err != nil {
		return nil, err
	}
	return c, nil
}

// writeServiceAccountKey writes a fresh RSA key; kube-apiserver reads the public
// half from the same private-key file.
func writeServiceAccountKey(path string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("service-account key: %w", err)
	}
	der := x509.MarshalPKCS1PrivateKey(key)
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: der}), 0o600)
}

func randomToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// serverCA returns the certificate chain kube-apiserver generated in --cert-dir;
// its last certificate is the self-signed CA that clients trust.
func (c *credentials) serverCA() ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(c.certDir, "apiserver.crt"))
	if err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("%s is empty", c.certDir)
	}
	return b, nil
}
