package cloudmap

import (
	"context"
	"fmt"
	"net/url"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/servicediscovery"

	"github.com/switchboard-mesh/switchboard/internal/awsaccess"
	"github.com/switchboard-mesh/switchboard/registry"
)

// Parameter names; commands turn each into a flag of the same name.
const (
	ParamNamespace        = "cloudmap-namespace"
	ParamRegion           = "aws-region"
	ParamEndpoint         = "cloudmap-endpoint"
	ParamCreateNamespace  = "cloudmap-create-namespace"
	ParamOperationTimeout = "cloudmap-operation-timeout"
)

func init() {
	registry.RegisterBackend(registry.Backend{
		Name:        "cloudmap",
		Description: "AWS Cloud Map (servicediscovery); no change feed, the registrar polls it",
		Params: []registry.Param{
			{Name: ParamNamespace, Default: DefaultNamespace, Usage: "Cloud Map namespace name or id (ns-…)"},
			// Declared identically by the dynamodb backend: commands share one flag.
			{Name: ParamRegion, Default: "us-east-1", Usage: "AWS region"},
			{Name: ParamEndpoint, Usage: "Cloud Map API endpoint URL, for local or fake servers (default: the region's AWS endpoint)"},
			{Name: ParamCreateNamespace, Default: "false", Usage: "create the Cloud Map namespace (as an HTTP namespace) if it does not exist"},
			{Name: ParamOperationTimeout, Default: DefaultOperationTimeout.String(), Usage: "how long to wait for an asynchronous Cloud Map operation (register, deregister) to finish"},
			// Declared identically by the dynamodb backend: commands share one flag.
			{Name: awsaccess.Param, Default: "false", Usage: awsaccess.ParamUsage},
		},
		Open: open,
		// `switchboard registry init` creates the namespace: opening with creation
		// on is exactly that. Services are created on demand by writes.
		Init: func(ctx context.Context, cfg registry.Config) error {
			cfg.Params[ParamCreateNamespace] = "true"
			r, err := open(ctx, cfg)
			if err != nil {
				return err
			}
			return r.Close()
		},
	})
}

// open builds a client from the standard AWS configuration chain (environment,
// shared files; the instance role only where AWS access is configured or allowed,
// see internal/awsaccess) and the backend parameters.
func open(ctx context.Context, cfg registry.Config) (registry.Driver, error) {
	create, err := cfg.Bool(ParamCreateNamespace)
	if err != nil {
		return nil, err
	}
	timeout, err := cfg.Duration(ParamOperationTimeout)
	if err != nil {
		return nil, err
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("%w: %s %q must be a positive duration", registry.ErrBadParam, ParamOperationTimeout, cfg.String(ParamOperationTimeout))
	}
	endpoint := cfg.String(ParamEndpoint)
	if endpoint != "" {
		if u, err := url.Parse(endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%w: %s %q is not an http(s) URL", registry.ErrBadParam, ParamEndpoint, endpoint)
		}
	}
	region := cfg.String(ParamRegion)
	if region == "" {
		return nil, fmt.Errorf("%w: %s is required", registry.ErrBadParam, ParamRegion)
	}
	role, err := cfg.Bool(awsaccess.Param)
	if err != nil {
		return nil, err
	}
	if err := awsaccess.Check(role); err != nil {
		return nil, err
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(region))
	if err != nil {
		return nil, fmt.Errorf("load AWS configuration: %w", err)
	}
	client := servicediscovery.NewFromConfig(awsCfg, func(o *servicediscovery.Options) {
		if endpoint != "" {
			o.BaseEndpoint = &endpoint
		}
	})
	return newDriver(ctx, Options{
		Client:           client,
		Namespace:        cfg.String(ParamNamespace),
		CreateNamespace:  create,
		OperationTimeout: timeout,
		Logger:           cfg.Logger,
	})
}
