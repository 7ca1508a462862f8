//go:build tools

// Package deps pins the libraries the packages of this module are built on, so that
// go.mod lists them before the code that imports them lands.
package deps

import (
	_ "github.com/aws/aws-sdk-go-v2/config"
	_ "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	_ "github.com/aws/aws-sdk-go-v2/service/servicediscovery"
	_ "github.com/google/uuid"
	_ "github.com/nats-io/nats-server/v2/server"
	_ "github.com/nats-io/nats.go"
	_ "github.com/nats-io/nats.go/jetstream"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/spf13/cobra"
	_ "github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	_ "github.com/spiffe/go-spiffe/v2/svid/jwtsvid"
	_ "github.com/spiffe/go-spiffe/v2/workloadapi"
	_ "github.com/truora/minidyn/server"
	_ "go.etcd.io/etcd/client/v3"
	_ "go.etcd.io/etcd/server/v3/embed"
	_ "go.uber.org/goleak"
	_ "google.golang.org/grpc"
	_ "google.golang.org/grpc/health"
	_ "google.golang.org/grpc/reflection"
	_ "google.golang.org/protobuf/proto"
	_ "gopkg.in/yaml.v3"
	_ "k8s.io/client-go/util/workqueue"
	_ "modernc.org/sqlite"
)
