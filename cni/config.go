package cni

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/utils"
	"github.com/containernetworking/cni/pkg/version"
)

// Policy says what the plugin does when the agent cannot record an attachment.
type Policy string

const (
	// PolicyAllow lets the pod start (or stop) without the agent: the pod's network
	// never depends on Switchboard, and the agent's GC catches up later.
	PolicyAllow Policy = "allow"
	// PolicyFail fails ADD and CHECK with "try again later", so the runtime retries
	// until the agent has recorded the pod.
	PolicyFail Policy = "fail"
)

// Defaults and bounds of the plugin's own configuration keys.
const (
	DefaultAgentSocket = "/run/switchboard/cni.sock"
	DefaultPolicy      = PolicyAllow
	DefaultTimeout     = 2 * time.Second
	// MaxTimeout bounds timeout: the runtime waits for every plugin of a pod in turn,
	// and the kubelet's own sandbox deadline is a few minutes.
	MaxTimeout = time.Minute
)

// maxSocketPath is the longest path a Unix socket address holds on Linux (sun_path
// is 108 bytes with its terminating NUL); a longer one only fails at dial time.
const maxSocketPath = 107

// Config is the plugin's network configuration as the runtime hands it on stdin: the
// plugin's entry of the .conflist with name, cniVersion and prevResult injected.
type Config struct {
	// Net holds the standard keys; Net.PrevResult is parsed at Net.CNIVersion.
	Net                types.PluginConf
	AgentSocket        string
	OnAgentUnreachable Policy
	Timeout            time.Duration
	// HasValidAttachments tells an empty cni.dev/valid-attachments (nothing is
	// valid: forget everything) from an absent one (the runtime said nothing).
	HasValidAttachments bool
}

// Our configuration keys.
const (
	keySocket  = "agentSocket"
	keyPolicy  = "onAgentUnreachable"
	keyTimeout = "timeout"
)

const (
	keyValidAttachments = "cni.dev/valid-attachments"
	// keyAttachments is the name an earlier spec text used; libcni sends both.
	keyAttachments = "cni.dev/attachments"
)

// knownKeys are the keys a plugin's configuration may carry: the spec's, those the
// runtime injects (prevResult, runtimeConfig, the GC attachments), and ours.
var knownKeys = []string{
	"cniVersion", "cniVersions", "name", "type", "prevResult", "runtimeConfig",
	"capabilities", "args", "ipam", "dns", "disableCheck", "disableGC",
	keyValidAttachments, keyAttachments,
	keySocket, keyPolicy, keyTimeout,
}

// ParseConfig parses the plugin's network configuration. Errors are *types.Error: an
// unknown key is code 2 (unsupported field), a bad value code 7 (invalid network
// config), JSON that does not decode code 6, each naming the key.
func ParseConfig(data []byte) (*Config, error) {
	cfg, _, err := parseConfig(data, true)
	return cfg, err
}

// parseConfig is ParseConfig, and with strict false (for DEL) it returns what it
// ignored instead of refusing it: keys it does not know (sorted; the rest is read as
// if they were not there), then our own keys' bad values (their defaults are used)
// and a prevResult that does not decode (DEL does not read it).
func parseConfig(data []byte, strict bool) (*Config, []string, error) {
	raw, err := topLevel(data)
	if err != nil {
		return nil, nil, err
	}
	unknown := unknownKeys(raw)
	if len(unknown) > 0 {
		if strict {
			return nil, nil, unsupported(unknown)
		}
		// encoding/json matches keys case-insensitively: an unknown "Name" must not
		// stand in for name.
		for _, k := range unknown {
			delete(raw, k)
		}
		if data, err = json.Marshal(raw); err != nil {
			return nil, nil, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("network config does not decode: %v", err), "")
		}
	}
	cfg := &Config{AgentSocket: DefaultAgentSocket, OnAgentUnreachable: DefaultPolicy, Timeout: DefaultTimeout}
	if err := cfg.decodeStandard(data, raw, strict); err != nil {
		return nil, nil, err
	}
	bad, err := cfg.decodeOwn(raw, strict)
	if err != nil {
		return nil, nil, err
	}
	return cfg, append(unknown, bad...), nil
}

// topLevel splits the configuration into its keys, each value as written.
func topLevel(data []byte) (map[string]json.RawMessage, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("network config does not decode: %v", err), "")
	}
	if raw == nil {
		return nil, types.NewError(types.ErrDecodingFailure, "network config is not a JSON object", "")
	}
	return raw, nil
}

// unknownKeys lists, sorted, the keys the plugin does not know.
func unknownKeys(raw map[string]json.RawMessage) []string {
	var unknown []string
	for k := range raw {
		if !slices.Contains(knownKeys, k) {
			unknown = append(unknown, k)
		}
	}
	slices.Sort(unknown)
	return unknown
}

// unsupported is the error for unknown keys: a misspelt option would otherwise be
// silently replaced by its default.
func unsupported(unknown []string) *types.Error {
	quoted := make([]string, len(unknown))
	for i, k := range unknown {
		quoted[i] = fmt.Sprintf("%q", k)
	}
	return types.NewError(types.ErrUnsupportedField,
		"unsupported field "+strings.Join(quoted, ", ")+" in network config",
		"known fields: "+strings.Join(knownKeys, ", "))
}

// decodeStandard fills Net and parses prevResult at the config's cniVersion.
func (c *Config) decodeStandard(data []byte, raw map[string]json.RawMessage, strict bool) error {
	if err := json.Unmarshal(data, &c.Net); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			key, _, _ := strings.Cut(te.Field, ".")
			return badValue(te.Field, raw[key], "want "+jsonKind(te.Type))
		}
		return types.NewError(types.ErrDecodingFailure, fmt.Sprintf("network config does not decode: %v", err), "")
	}
	if e := utils.ValidateNetworkName(c.Net.Name); e != nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "invalid network config: name "+fmt.Sprintf("%q", c.Net.Name)+": "+strings.TrimSuffix(e.Msg, ":"), "")
	}
	if err := c.decodeAttachments(raw); err != nil {
		return err
	}
	if err := version.ParsePrevResult(&c.Net); err != nil && !strict {
		c.Net.PrevResult = nil // DEL does not read it
	} else if err != nil {
		return types.NewError(types.ErrDecodingFailure, fmt.Sprintf("prevResult does not decode at cniVersion %q: %v", c.Net.CNIVersion, err), "")
	}
	return nil
}

// decodeAttachments notes whether GC's list of valid attachments was sent, falling
// back to the older key when only it was.
func (c *Config) decodeAttachments(raw map[string]json.RawMessage) error {
	if _, ok := raw[keyValidAttachments]; ok {
		c.HasValidAttachments = true
		return nil
	}
	v, ok := raw[keyAttachments]
	if !ok {
		return nil
	}
	if err := json.Unmarshal(v, &c.Net.ValidAttachments); err != nil {
		return badValue(keyAttachments, v, "want a list of {containerID, ifname}")
	}
	c.HasValidAttachments = true
	return nil
}

// decodeOwn reads and checks agentSocket, onAgentUnreachable and timeout.
func (c *Config) decodeOwn(raw map[string]json.RawMessage, strict bool) (warnings []string, err error) {
	for _, own := range []struct {
		key    string
		decode func(json.RawMessage) error
	}{{keySocket, c.decodeSocket}, {keyPolicy, c.decodePolicy}, {keyTimeout, c.decodeTimeout}} {
		v, ok := raw[own.key]
		if !ok {
			continue
		}
		if err := own.decode(v); err != nil {
			if strict {
				return nil, err
			}
			// DEL: a value that does not do leaves the default, so that the pod can
			// still be torn down.
			warnings = append(warnings, err.Error())
		}
	}
	return warnings, nil
}

func (c *Config) decodeSocket(v json.RawMessage) error {
	s, err := stringValue(keySocket, v)
	if err != nil {
		return err
	}
	if err := checkSocket(s); err != nil {
		return badValue(keySocket, v, err.Error())
	}
	c.AgentSocket = s
	return nil
}

func (c *Config) decodePolicy(v json.RawMessage) error {
	s, err := stringValue(keyPolicy, v)
	if err != nil {
		return err
	}
	p, err := ParsePolicy(s)
	if err != nil {
		return badValue(keyPolicy, v, err.Error())
	}
	c.OnAgentUnreachable = p
	return nil
}

func (c *Config) decodeTimeout(v json.RawMessage) error {
	s, err := stringValue(keyTimeout, v)
	if err != nil {
		return err
	}
	d, err := parseTimeout(s)
	if err != nil {
		return badValue(keyTimeout, v, err.Error())
	}
	c.Timeout = d
	return nil
}

func stringValue(key string, v json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", badValue(key, v, "want a string")
	}
	return s, nil
}

// badValue is the code-7 error naming the key and the value as written.
func badValue(key string, v json.RawMessage, why string) *types.Error {
	shown := string(v)
	if len(shown) > 80 {
		shown = shown[:77] + "..."
	}
	return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("invalid network config: %s %s: %s", key, shown, why), "")
}

// jsonKind names the JSON type a Go type decodes from, for error messages.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	}
	return "a number"
}

// ParsePolicy reads an onAgentUnreachable value.
func ParsePolicy(s string) (Policy, error) {
	switch p := Policy(s); p {
	case PolicyAllow, PolicyFail:
		return p, nil
	}
	return "", fmt.Errorf("want %q or %q", PolicyAllow, PolicyFail)
}

// parseTimeout reads a timeout value: a Go duration in (0, MaxTimeout].
func parseTimeout(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New("want a duration such as 2s or 500ms")
	}
	return d, checkTimeout(d)
}

func checkTimeout(d time.Duration) error {
	switch {
	case d <= 0:
		return errors.New("must be positive")
	case d > MaxTimeout:
		return fmt.Errorf("must be at most %s", MaxTimeout)
	}
	return nil
}

// checkSocket accepts an absolute path a Unix socket can have: a relative one would
// depend on the runtime's working directory.
func checkSocket(s string) error {
	switch {
	case !filepath.IsAbs(s):
		return errors.New("must be an absolute path")
	case len(s) > maxSocketPath:
		return fmt.Errorf("longer than the %d bytes a Unix socket path may have", maxSocketPath)
	case strings.ContainsRune(s, 0):
		return errors.New("contains a NUL byte")
	}
	return nil
}
