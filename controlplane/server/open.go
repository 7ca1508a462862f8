package server

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/switchboard-mesh/switchboard/controlplane/auth"
	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/controlplane/store/memory"
	"github.com/switchboard-mesh/switchboard/controlplane/store/sqlite"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil"
)

// openStore opens the database section's store.
func openStore(ctx context.Context, db config.Database) (store.Store, error) {
	switch db.Type {
	case "", config.DatabaseInMemory:
		return memory.New(), nil
	case config.DatabaseSQLite:
		st, err := sqlite.Open(ctx, db.Path)
		if err != nil {
			return nil, fmt.Errorf("database: %w", err)
		}
		return st, nil
	}
	return nil, fmt.Errorf("database: unknown type %q (want %s or %s)", db.Type, config.DatabaseInMemory, config.DatabaseSQLite)
}

// openAuth builds the registration authenticator, unless the options carry one.
func openAuth(ctx context.Context, o Options) (auth.Authenticator, error) {
	if o.Auth != nil {
		return o.Auth, nil
	}
	ra := o.Config.RegistrationAuth
	a, err := auth.New(ctx, auth.Config{
		Type: ra.Type, Secrets: ra.Secrets, SocketPath: ra.SocketPath, Audience: ra.Audience, Window: ra.MaxTokenAge,
	})
	if err != nil {
		return nil, fmt.Errorf("registration_auth: %w", err)
	}
	return a, nil
}

// serverOptions secures a gRPC endpoint as its tls section says: plaintext when
// insecure, TLS with cert_file and key_file, mTLS when ca_file is set too.
func serverOptions(t config.TLS) ([]grpc.ServerOption, error) {
	if t.Insecure {
		return nil, nil
	}
	conf, err := tlsutil.ServerConfig(tlsutil.Files{CA: t.CAFile, Cert: t.CertFile, Key: t.KeyFile}, "")
	if err != nil {
		return nil, err
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(conf))}, nil
}
