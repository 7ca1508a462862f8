package access

import (
	"encoding/json"
	"strings"
	"testing"

	controlplanev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controlplane/v1"
)

// TestAuditRedactsSecrets: a request carrying a group's registration secret is
// logged with the secret redacted and everything else kept; the handler's request
// is left as it was.
func TestAuditRedactsSecrets(t *testing.T) {
	const secret = "a-registration-secret-0123456789abcdef"
	req := &controlplanev1.GroupSecretRequest{Group: "edge", Secret: secret}
	line := compact(redacted(req))
	if strings.Contains(line, secret) || !strings.Contains(line, "[redacted]") || !strings.Contains(line, `"edge"`) {
		t.Fatalf("audit request %s: want the group, and the secret redacted", line)
	}
	if req.GetSecret() != secret {
		t.Fatalf("redaction changed the handler's request: %q", req.GetSecret())
	}
	plain := &controlplanev1.SegmentRequest{Name: "tenants"}
	var got map[string]string
	if err := json.Unmarshal([]byte(compact(redacted(plain))), &got); err != nil || len(got) != 1 || got["name"] != "tenants" {
		t.Fatalf("a request without secrets: %v, %v", got, err)
	}
	if got := compact(redacted(nil)); got != "null" {
		t.Fatalf("nil request: %s", got)
	}
}
