package dynamodb

import (
	"context"

	"github.com/switchboard-mesh/switchboard/internal/awsaccess"
	"github.com/switchboard-mesh/switchboard/registry"
)

// Parameter names; commands turn each into a flag of the same name. The cloudmap
// backend declares "aws-region" too, with the same default and usage.
const (
	ParamTable       = "dynamodb-table"
	ParamRegion      = "aws-region"
	ParamEndpoint    = "dynamodb-endpoint"
	ParamCreateTable = "dynamodb-create-table"
)

// Defaults for Config and the backend's parameters.
const (
	DefaultTable  = "switchboard-endpoints"
	DefaultRegion = "us-east-1"
)

func init() {
	registry.RegisterBackend(registry.Backend{
		Name:        "dynamodb",
		Description: "Amazon DynamoDB table (batched TransactWriteItems; no change feed, the registrar polls it)",
		Params: []registry.Param{
			{Name: ParamTable, Default: DefaultTable, Usage: "DynamoDB table holding the endpoints"},
			{Name: ParamRegion, Default: DefaultRegion, Usage: "AWS region"},
			{Name: ParamEndpoint, Usage: "DynamoDB endpoint URL, for local servers (default: the region's AWS endpoint)"},
			{Name: ParamCreateTable, Default: "false", Usage: "create the DynamoDB table (and enable its TTL) if it does not exist"},
			// Declared identically by the cloudmap backend: commands share one flag.
			{Name: awsaccess.Param, Default: "false", Usage: awsaccess.ParamUsage},
		},
		Open: openBackend,
		// `switchboard registry init` creates the table: opening with creation on
		// is exactly that.
		Init: func(ctx context.Context, cfg registry.Config) error {
			cfg.Params[ParamCreateTable] = "true"
			r, err := openBackend(ctx, cfg)
			if err != nil {
				return err
			}
			return r.Close()
		},
	})
}

func openBackend(ctx context.Context, cfg registry.Config) (registry.Driver, error) {
	create, err := cfg.Bool(ParamCreateTable)
	if err != nil {
		return nil, err
	}
	role, err := cfg.Bool(awsaccess.Param)
	if err != nil {
		return nil, err
	}
	return open(ctx, Config{
		InstanceRole: role,
		Table:        cfg.String(ParamTable),
		Region:       cfg.String(ParamRegion),
		Endpoint:     cfg.String(ParamEndpoint),
		CreateTable:  create,
		Logger:       cfg.Logger,
	})
}
