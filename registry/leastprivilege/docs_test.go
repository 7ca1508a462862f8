package leastprivilege_test

import (
	"os"
	"strings"
	"testing"
)

const docsSection = "## Least-privilege NATS and etcd credentials"

// TestDocsShowTheTestedGrants keeps docs/operations.md honest: its NATS permission
// block and its etcdctl commands are, verbatim, the ones these tests enforce.
func TestDocsShowTheTestedGrants(t *testing.T) {
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), docsSection+"\n")
	if !ok {
		t.Fatalf("docs/operations.md has no section %q", docsSection)
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	for name, block := range map[string]string{"natsPermissions": natsPermissions, "etcdSetup": etcdSetup} {
		if !strings.Contains(section, "```\n"+block+"```\n") && !strings.Contains(section, "```sh\n"+block+"```\n") {
			t.Errorf("the section %q does not show %s verbatim in a code block", docsSection, name)
		}
	}
	accounts := strings.Replace(natsAccounts, "%s", "", 1)
	if !strings.Contains(section, accounts) {
		t.Errorf("the section %q does not show the accounts block verbatim", docsSection)
	}
}
