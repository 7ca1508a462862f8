package memory

import (
	"context"
	"maps"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// SetGroupSecret implements store.Store.
func (s *Store) SetGroupSecret(ctx context.Context, group, secret string) error {
	t, unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	keep(t, s.secrets, group)
	s.secrets[group] = secret
	return nil
}

// DeleteGroupSecret implements store.Store.
func (s *Store) DeleteGroupSecret(ctx context.Context, group string) error {
	t, unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if _, ok := s.secrets[group]; !ok {
		return store.NotFound("group secret", group)
	}
	keep(t, s.secrets, group)
	delete(s.secrets, group)
	return nil
}

// ListGroupSecrets implements store.Store.
func (s *Store) ListGroupSecrets(ctx context.Context) (map[string]string, error) {
	unlock, err := s.rlock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return maps.Clone(s.secrets), nil
}
