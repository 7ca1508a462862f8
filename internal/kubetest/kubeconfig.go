package kubetest

import (
	"path/filepath"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// WriteKubeconfig writes a kubeconfig for the admin identity to path, for a
// separate process started with --kubeconfig (or KUBECONFIG).
func (c *Cluster) WriteKubeconfig(path string) error {
	const name = "kubetest"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{
		Server:                   c.Config.Host,
		CertificateAuthorityData: c.Config.CAData,
	}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: c.Config.BearerToken}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	cfg.CurrentContext = name
	return clientcmd.WriteToFile(*cfg, path)
}

// Kubeconfig writes the admin kubeconfig into the test's temporary directory and
// returns its path.
func (c *Cluster) Kubeconfig(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := c.WriteKubeconfig(path); err != nil {
		t.Fatalf("kubetest: write kubeconfig: %v", err)
	}
	return path
}
