// Package awsaccess keeps the AWS SDK away from the instance metadata service (IMDS)
// unless the user configured AWS access. The SDK's default credential chain ends at
// IMDS, so any command that opens an AWS backend on a machine with no AWS
// configuration would otherwise call a cloud metadata address (and wait for it).
// See docs/backends.md, "AWS credentials".
package awsaccess

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// Param is the backend parameter (and flag) that allows the instance role: the
// metadata service is then asked for credentials even with no other AWS
// configuration. The AWS backends declare it identically, so commands share one flag.
const Param = "aws-instance-metadata"

// ParamUsage is the parameter's help text.
const ParamUsage = "allow AWS credentials from the instance metadata service (an EC2 instance role) when no AWS_* variables or ~/.aws files configure access; without it no command contacts the metadata address"

// ErrNotConfigured is returned by Check when nothing configures AWS access.
var ErrNotConfigured = errors.New("AWS access is not configured: set AWS_* variables (keys, a profile, a web identity) or ~/.aws files, " +
	"or pass --" + Param + " to use this machine's instance role")

// Check refuses to go on when no AWS access is configured in the environment or the
// shared files and the instance role is not allowed: the SDK's chain would then end
// at the metadata service. With access configured (the shared files may themselves
// name the metadata service) or the role allowed, the SDK's chain is used as is.
func Check(allowInstanceRole bool) error {
	if allowInstanceRole || configured(os.Environ(), home()) {
		return nil
	}
	return ErrNotConfigured
}

// access are the variables through which the SDK finds credentials.
var access = map[string]bool{
	"AWS_ACCESS_KEY_ID": true, "AWS_SECRET_ACCESS_KEY": true, "AWS_SESSION_TOKEN": true,
	"AWS_PROFILE": true, "AWS_DEFAULT_PROFILE": true,
	"AWS_WEB_IDENTITY_TOKEN_FILE": true, "AWS_ROLE_ARN": true,
	"AWS_CONTAINER_CREDENTIALS_FULL_URI": true, "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": true,
}

// configured reports whether env or the shared AWS files configure AWS access:
// a credential variable, AWS_EC2_METADATA_DISABLED=false (the metadata service asked
// for by name), or a shared config or credentials file that exists. Settings such as
// AWS_CA_BUNDLE or the metadata service's address configure no access.
func configured(env []string, home string) bool {
	files := map[string]string{
		"AWS_CONFIG_FILE":             filepath.Join(home, ".aws", "config"),
		"AWS_SHARED_CREDENTIALS_FILE": filepath.Join(home, ".aws", "credentials"),
	}
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		switch {
		case value == "":
		case access[name], name == "AWS_EC2_METADATA_DISABLED" && strings.EqualFold(value, "false"):
			return true
		case files[name] != "":
			files[name] = value
		}
	}
	for _, f := range files {
		if home == "" && !filepath.IsAbs(f) {
			continue
		}
		if _, err := os.Stat(f); err == nil {
			return true
		}
	}
	return false
}

func home() string {
	h, _ := os.UserHomeDir()
	return h
}
