package server

import (
	"context"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
	cpetcd "github.com/switchboard-mesh/switchboard/controlplane/store/etcd"
	"github.com/switchboard-mesh/switchboard/controlplane/store/memory"
	"github.com/switchboard-mesh/switchboard/controlplane/store/sqlite"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil"
	"github.com/switchboard-mesh/switchboard/nodeauth"
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
	case config.DatabaseEtcd:
		return openEtcd(ctx, db.Etcd)
	}
	return nil, fmt.Errorf("database: unknown type %q (want %s, %s or %s)", db.Type, config.DatabaseInMemory, config.DatabaseSQLite, config.DatabaseEtcd)
}

// openEtcd opens the etcd store as a standby's: it writes only once elected.
func openEtcd(ctx context.Context, e config.Etcd) (store.Store, error) {
	o := cpetcd.Options{Endpoints: e.Endpoints, Prefix: e.Prefix, Username: e.Username, DialTimeout: e.DialTimeout, RequireLeader: true}
	if e.CAFile != "" || e.CertFile != "" {
		conf, err := tlsutil.ClientConfig(tlsutil.Files{CA: e.CAFile, Cert: e.CertFile, Key: e.KeyFile}, "", "")
		if err != nil {
			return nil, fmt.Errorf("database.etcd: %w", err)
		}
		o.TLS = conf
	}
	if e.PasswordFile != "" {
		b, err := os.ReadFile(e.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("database.etcd.password_file: %w", err)
		}
		o.Password = strings.TrimRight(string(b), "\r\n")
	}
	st, err := cpetcd.Open(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	return st, nil
}

// openAuth builds the registration authenticator, unless the options carry one.
func openAuth(ctx context.Context, o Options) (nodeauth.Authenticator, error) {
	if o.Auth != nil {
		return o.Auth, nil
	}
	ra := o.Config.RegistrationAuth
	a, err := nodeauth.New(ctx, nodeauth.Config{
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
