package server

import (
	"github.com/switchboard-mesh/switchboard/controlplane/access"
)

// openAccess builds the northbound authorizer and says at start-up, loudly, what is
// left unprotected.
func (s *Server) openAccess() error {
	cfg := s.o.Config
	a, err := access.New(access.Options{
		Config: cfg.NorthboundAuthorization, Logger: s.log.With("component", "northbound-access"),
		Audit: s.o.AuditLogger, Metrics: s.metrics.reg,
	})
	if err != nil {
		return err
	}
	s.access = a
	if a.Enabled() {
		s.log.Info("northbound roles enforced", "identities", a.Identities(), "token_file", cfg.NorthboundAuthorization.TokenFile, "tokens", a.TokenCount())
	} else {
		s.log.Warn("the northbound API is unauthenticated: whoever can reach it can change the topology; configure northbound.authorization",
			"endpoint", cfg.Northbound.Endpoint)
	}
	for _, p := range cfg.Insecurities() {
		// Only reachable with AllowInsecureRemote: CheckListeners refused the rest.
		s.log.Warn("insecure listener allowed by --insecure (allow_insecure_remote)", "problem", p.What, "fix", p.Fix)
	}
	return nil
}

// ReloadTokens re-reads the northbound token file (on SIGHUP). On error the tokens in
// force stay in force.
func (s *Server) ReloadTokens() error { return s.access.Reload() }
