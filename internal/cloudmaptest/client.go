package cloudmaptest

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/servicediscovery"
)

// Fake credentials: the fake checks that requests are signed, not by whom.
const (
	AccessKeyID     = "AKIDCLOUDMAPFAKE"
	SecretAccessKey = "fake-secret"
)

// NewClient returns a real SDK client pointed at the fake, with static credentials
// and a retryer whose backoff is short enough for tests that throttle.
func (s *Server) NewClient() *servicediscovery.Client {
	return servicediscovery.New(servicediscovery.Options{
		Region:       s.opts.Region,
		BaseEndpoint: aws.String(s.URL()),
		Credentials:  credentials.NewStaticCredentialsProvider(AccessKeyID, SecretAccessKey, ""),
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = 5
			o.MaxBackoff = 20 * time.Millisecond
		}),
	})
}

// SetCredentialsEnv points the standard AWS credential chain at fake static
// credentials for the rest of the test, so code that loads the default config (as
// registry.Open does) signs requests without reading the user's files or probing
// the EC2 metadata service.
func SetCredentialsEnv(t testing.TB) {
	t.Helper()
	missing := filepath.Join(t.TempDir(), "none")
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID":           AccessKeyID,
		"AWS_SECRET_ACCESS_KEY":       SecretAccessKey,
		"AWS_SESSION_TOKEN":           "",
		"AWS_PROFILE":                 "",
		"AWS_CONFIG_FILE":             missing,
		"AWS_SHARED_CREDENTIALS_FILE": missing,
		"AWS_EC2_METADATA_DISABLED":   "true",
	} {
		t.Setenv(k, v)
	}
}
