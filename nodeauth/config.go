package nodeauth

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spiffe/go-spiffe/v2/workloadapi"
)

// Auth kinds accepted in Config.Type and ProviderConfig.Type.
const (
	TypeNone         = ""
	TypeNoop         = "noop"
	TypeSharedSecret = "shared_secret"
	TypeSPIRE        = "spire"
)

// Config is the control plane's registration_auth section, converted by the config
// package:
//
//	registration_auth: {type: shared_secret, secrets: {group: secret}}
//	registration_auth: {type: spire, socket_path: /run/spire/agent-sockets/api.sock}
type Config struct {
	// Type is "", "noop", "shared_secret" or "spire".
	Type string
	// Secrets maps group name to secret (shared_secret).
	Secrets map[string]string
	// SocketPath is the SPIFFE Workload API socket (spire): a path or a
	// "unix://" / "tcp://" address. Empty means the SPIFFE_ENDPOINT_SOCKET variable.
	SocketPath string
	// Audience is the JWT-SVID audience demanded (spire); DefaultAudience when empty.
	Audience string
	// Window, MaxSkew and ReplayCacheSize tune shared_secret; zero means default.
	Window          time.Duration
	MaxSkew         time.Duration
	ReplayCacheSize int
}

// New builds the control plane's Authenticator. For spire it connects to the Workload
// API and waits (bounded by ctx) for the first set of trust bundles; Close releases it.
func New(ctx context.Context, cfg Config) (Authenticator, error) {
	switch cfg.Type {
	case TypeNone, TypeNoop:
		return Noop{}, nil
	case TypeSharedSecret:
		return NewSharedSecret(cfg.Secrets, SharedSecretOptions{
			Window: cfg.Window, MaxSkew: cfg.MaxSkew, ReplayCacheSize: cfg.ReplayCacheSize,
		})
	case TypeSPIRE:
		src, err := openJWTSource(ctx, cfg.SocketPath)
		if err != nil {
			return nil, err
		}
		a, _ := NewSPIFFE(src, cfg.Audience)
		a.closer = src.Close
		return a, nil
	default:
		return nil, fmt.Errorf("registration_auth: unknown type %q (want noop, shared_secret or spire)", cfg.Type)
	}
}

// ProviderConfig is a data-plane node's side of registration auth.
type ProviderConfig struct {
	// Type is "", "noop", "shared_secret" or "spire".
	Type string
	// Secret is this node's group secret (shared_secret).
	Secret string
	// SocketPath and Audience as in Config (spire).
	SocketPath string
	Audience   string
}

// NewTokenProvider builds a node's TokenProvider; Close releases it.
func NewTokenProvider(ctx context.Context, cfg ProviderConfig) (TokenProvider, error) {
	switch cfg.Type {
	case TypeNone, TypeNoop:
		return Noop{}, nil
	case TypeSharedSecret:
		return NewSharedSecretProvider(cfg.Secret, SharedSecretOptions{})
	case TypeSPIRE:
		src, err := openJWTSource(ctx, cfg.SocketPath)
		if err != nil {
			return nil, err
		}
		p, _ := NewSPIFFEProvider(src, cfg.Audience)
		p.closer = src.Close
		return p, nil
	default:
		return nil, fmt.Errorf("registration auth provider: unknown type %q (want noop, shared_secret or spire)", cfg.Type)
	}
}

func openJWTSource(ctx context.Context, socketPath string) (*workloadapi.JWTSource, error) {
	var opts []workloadapi.JWTSourceOption
	if socketPath != "" {
		opts = append(opts, workloadapi.WithClientOptions(workloadapi.WithAddr(workloadAddr(socketPath))))
	}
	src, err := workloadapi.NewJWTSource(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("spire auth: workload API at %q: %w", socketPath, err)
	}
	return src, nil
}

// workloadAddr turns a bare socket path into the URL form go-spiffe expects.
func workloadAddr(p string) string {
	if strings.HasPrefix(p, "unix:") || strings.HasPrefix(p, "tcp:") {
		return p
	}
	return "unix://" + p
}
