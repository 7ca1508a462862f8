package tlsutil

import (
	"context"
	"crypto/tls"
	"fmt"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	"github.com/spiffe/go-spiffe/v2/workloadapi"
)

// Source is this workload's X.509 SVID and trust bundles, kept current from the
// SPIFFE Workload API (a SPIRE agent). TLS configurations built from it rotate
// certificates without a restart.
type Source struct {
	src *workloadapi.X509Source
	own spiffeid.TrustDomain
}

// NewSource connects to the Workload API at socket (e.g.
// unix:///run/spire/agent.sock) and waits, bounded by ctx, for the first SVID.
func NewSource(ctx context.Context, socket string) (*Source, error) {
	src, err := workloadapi.NewX509Source(ctx, workloadapi.WithClientOptions(workloadapi.WithAddr(socket)))
	if err != nil {
		return nil, fmt.Errorf("spiffe: workload API at %s: %w", socket, err)
	}
	svid, err := src.GetX509SVID()
	if err != nil {
		_ = src.Close()
		return nil, fmt.Errorf("spiffe: no X.509 SVID from %s: %w", socket, err)
	}
	return &Source{src: src, own: svid.ID.TrustDomain()}, nil
}

// TrustDomain is the trust domain of this workload's SVID: the one peers are held
// to when a config is asked for with an empty trust domain.
func (s *Source) TrustDomain() spiffeid.TrustDomain { return s.own }

// Close stops watching the Workload API.
func (s *Source) Close() error { return s.src.Close() }

// ServerConfig is mTLS for a server whose clients must belong to trustDomain
// (empty: this workload's own trust domain).
func (s *Source) ServerConfig(trustDomain string) (*tls.Config, error) {
	td, err := s.trustDomain(trustDomain)
	if err != nil {
		return nil, err
	}
	return tlsconfig.MTLSServerConfig(s.src, s.src, tlsconfig.AuthorizeMemberOf(td)), nil
}

// ClientConfig is mTLS for a client whose server must belong to trustDomain
// (empty: this workload's own trust domain).
func (s *Source) ClientConfig(trustDomain string) (*tls.Config, error) {
	td, err := s.trustDomain(trustDomain)
	if err != nil {
		return nil, err
	}
	return tlsconfig.MTLSClientConfig(s.src, s.src, tlsconfig.AuthorizeMemberOf(td)), nil
}

func (s *Source) trustDomain(name string) (spiffeid.TrustDomain, error) {
	if name == "" {
		return s.own, nil
	}
	td, err := spiffeid.TrustDomainFromString(name)
	if err != nil {
		return spiffeid.TrustDomain{}, fmt.Errorf("spiffe: trust domain %q: %w", name, err)
	}
	return td, nil
}
