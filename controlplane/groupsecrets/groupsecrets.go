// Package groupsecrets manages the registration secrets of groups at runtime, in API
// mode with shared-secret registration auth: add, rotate and remove a group's secret
// through the northbound API, kept in the control plane's store so a restart keeps
// them. Secrets from the config file stay the file's: they cannot be changed here.
// See docs/controlplane.md, "Registration auth".
package groupsecrets

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/nodeauth"
)

// Errors callers branch on (the API maps them to gRPC codes).
var (
	// ErrUnavailable: secrets cannot be managed here: config mode, or registration
	// auth is not shared_secret (FailedPrecondition).
	ErrUnavailable = errors.New("group secrets cannot be managed at runtime")
	// ErrFromFile: the group's secret comes from the config file (FailedPrecondition).
	ErrFromFile = errors.New("the group's secret comes from the config file")
	// ErrInvalid: a bad group name or a short secret (InvalidArgument).
	ErrInvalid = errors.New("invalid group secret")
)

// Where a group's secret comes from.
const (
	SourceNone   = ""
	SourceConfig = "config"
	SourceAPI    = "api"
)

// Options configure a Manager.
type Options struct {
	Store store.Store
	// Verifier is the registration authenticator when it is shared_secret; nil
	// otherwise, and then nothing can be managed.
	Verifier *nodeauth.SharedSecret
	// FileGroups are the groups whose secret the config file sets.
	FileGroups []string
	// Mode of the control plane: secrets are managed in API mode only.
	Mode config.Mode
	// Disconnect ends the control streams of every connected node of group and
	// returns how many there were.
	Disconnect func(group string) int
}

// Manager changes group secrets in the store and the verifier together.
type Manager struct {
	o        Options
	fromFile map[string]bool
	mu       sync.Mutex // one change at a time, so store and verifier agree
}

// New returns a Manager and, in API mode with a verifier, loads the stored secrets
// into the verifier (a file's secret wins over a stored one of the same group).
func New(ctx context.Context, o Options) (*Manager, error) {
	m := &Manager{o: o, fromFile: map[string]bool{}}
	for _, g := range o.FileGroups {
		m.fromFile[g] = true
	}
	if !m.available() {
		return m, nil
	}
	stored, err := o.Store.ListGroupSecrets(ctx)
	if err != nil {
		return nil, fmt.Errorf("load group secrets: %w", err)
	}
	for g, secret := range stored {
		if m.fromFile[g] {
			continue
		}
		if err := o.Verifier.SetSecret(g, secret); err != nil {
			return nil, fmt.Errorf("stored secret of group %s: %w", g, err)
		}
	}
	return m, nil
}

func (m *Manager) available() bool {
	return m.o.Verifier != nil && m.o.Mode == config.APIMode
}

// Source says where group's secret comes from.
func (m *Manager) Source(group string) string {
	switch {
	case m.o.Verifier == nil || !m.o.Verifier.HasSecret(group):
		return SourceNone
	case m.fromFile[group]:
		return SourceConfig
	}
	return SourceAPI
}

// Groups returns every group that has a secret, sorted.
func (m *Manager) Groups(ctx context.Context) ([]string, error) {
	out := make([]string, 0, len(m.fromFile))
	for g := range m.fromFile {
		out = append(out, g)
	}
	if m.available() {
		stored, err := m.o.Store.ListGroupSecrets(ctx)
		if err != nil {
			return nil, err
		}
		for g := range stored {
			out = append(out, g)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Add gives a group without a secret its first one (store.ErrExists if it has one).
func (m *Manager) Add(ctx context.Context, group, secret string) error {
	return m.set(ctx, group, secret, false)
}

// Rotate replaces a group's secret (store.ErrNotFound if it has none). Nodes that
// registered with the old secret stay connected: a secret is checked only when a node
// registers, and rotating is routine; remove the secret to cut nodes off.
func (m *Manager) Rotate(ctx context.Context, group, secret string) error {
	return m.set(ctx, group, secret, true)
}

func (m *Manager) set(ctx context.Context, group, secret string, replace bool) error {
	if err := m.check(group); err != nil {
		return err
	}
	if len(secret) < nodeauth.MinSecretLen {
		return fmt.Errorf("%w: group %s: the secret is %d bytes, need at least %d", ErrInvalid, group, len(secret), nodeauth.MinSecretLen)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	has := m.o.Verifier.HasSecret(group)
	switch {
	case has && !replace:
		return store.Exists("group secret", group)
	case !has && replace:
		return store.NotFound("group secret", group)
	}
	// Store first: a secret the verifier accepts but the store lost would stop
	// working at the next restart.
	if err := m.o.Store.SetGroupSecret(ctx, group, secret); err != nil {
		return err
	}
	return m.o.Verifier.SetSecret(group, secret)
}

// Remove deletes a group's secret and disconnects the group's nodes, which can no
// longer register; it returns how many were disconnected.
func (m *Manager) Remove(ctx context.Context, group string) (int, error) {
	if err := m.check(group); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.o.Store.DeleteGroupSecret(ctx, group); err != nil {
		return 0, err
	}
	// Refuse new registrations before cutting off the connected nodes, so none
	// slips back in between.
	m.o.Verifier.RemoveSecret(group)
	if m.o.Disconnect == nil {
		return 0, nil
	}
	return m.o.Disconnect(group), nil
}

func (m *Manager) check(group string) error {
	switch {
	case m.o.Mode == config.ConfigMode:
		return fmt.Errorf("%w: the topology comes from the config file (config mode); set registration_auth.secrets there", ErrUnavailable)
	case m.o.Verifier == nil:
		return fmt.Errorf("%w: registration_auth.type is not %s", ErrUnavailable, config.AuthSharedSecret)
	}
	if err := config.ValidGroupName(group); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if m.fromFile[group] {
		return fmt.Errorf("%w: group %s; change it in registration_auth.secrets", ErrFromFile, group)
	}
	return nil
}
