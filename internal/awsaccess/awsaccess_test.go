package awsaccess

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigured(t *testing.T) {
	empty := t.TempDir()
	withFiles := t.TempDir()
	if err := os.MkdirAll(filepath.Join(withFiles, ".aws"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(withFiles, ".aws", "credentials"), []byte("[default]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		env  []string
		home string
		want bool
	}{
		{"nothing", []string{"PATH=/bin", "HOME=" + empty}, empty, false},
		{"only the metadata endpoint", []string{"AWS_EC2_METADATA_SERVICE_ENDPOINT=http://127.0.0.1:1"}, empty, false},
		{"an empty variable", []string{"AWS_PROFILE="}, empty, false},
		{"a CA bundle", []string{"AWS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt", "AWS_REGION=eu-west-1"}, empty, false},
		{"the metadata service asked for", []string{"AWS_EC2_METADATA_DISABLED=false"}, empty, true},
		{"the metadata service refused", []string{"AWS_EC2_METADATA_DISABLED=true"}, empty, false},
		{"static keys", []string{"AWS_ACCESS_KEY_ID=AKIA", "AWS_SECRET_ACCESS_KEY=x"}, empty, true},
		{"a profile", []string{"AWS_PROFILE=prod"}, empty, true},
		{"web identity (EKS)", []string{"AWS_WEB_IDENTITY_TOKEN_FILE=/var/run/token", "AWS_ROLE_ARN=arn"}, empty, true},
		{"shared credentials file", nil, withFiles, true},
		{"a config file that exists", []string{"AWS_CONFIG_FILE=" + filepath.Join(withFiles, ".aws", "credentials")}, empty, true},
		{"a config file that does not", []string{"AWS_CONFIG_FILE=" + filepath.Join(empty, "none"), "AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(empty, "none")}, withFiles, false},
		{"no home", nil, "", false},
	} {
		if got := configured(c.env, c.home); got != c.want {
			t.Errorf("%s: configured = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestCheck(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "AWS_") {
			t.Setenv(name, "")
		}
	}
	if err := Check(false); !errors.Is(err, ErrNotConfigured) || !strings.Contains(err.Error(), "--"+Param) {
		t.Fatalf("unconfigured: %v, want ErrNotConfigured naming --%s", err, Param)
	}
	if err := Check(true); err != nil {
		t.Fatalf("instance role allowed: %v", err)
	}
	t.Setenv("AWS_PROFILE", "prod")
	if err := Check(false); err != nil {
		t.Fatalf("configured: %v", err)
	}
}
