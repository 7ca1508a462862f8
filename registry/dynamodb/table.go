package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// How long to wait for a new table to become ACTIVE, and how often to look.
const (
	activeTimeout = 5 * time.Minute
	activePoll    = 500 * time.Millisecond
)

// prepareTable checks the table's key schema, creating the table first when asked,
// and reports whether the cluster GSI can serve queries.
func (r *driver) prepareTable(ctx context.Context, create bool) (bool, error) {
	desc, err := r.describe(ctx)
	var missing *types.ResourceNotFoundException
	switch {
	case errors.As(err, &missing) && create:
		if desc, err = r.createTable(ctx); err != nil {
			return false, err
		}
	case errors.As(err, &missing):
		return false, fmt.Errorf("dynamodb table %s does not exist: create it with the schema in the package documentation, or pass --%s", r.table, ParamCreateTable)
	case err != nil:
		return false, fmt.Errorf("describe dynamodb table %s: %w", r.table, err)
	}
	if err := checkKeySchema(desc.KeySchema); err != nil {
		return false, fmt.Errorf("dynamodb table %s: %w", r.table, err)
	}
	if create {
		r.enableTTL(ctx)
	}
	gsi := hasClusterIndex(desc)
	if !gsi {
		r.log.Warn("dynamodb: table has no ACTIVE "+clusterIndex+"; lists by cluster alone will Scan", "table", r.table)
	}
	return gsi, nil
}

func (r *driver) describe(ctx context.Context) (*types.TableDescription, error) {
	out, err := r.client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(r.table)})
	if err != nil {
		return nil, err
	}
	return out.Table, nil
}

func checkKeySchema(ks []types.KeySchemaElement) error {
	var hash, rng string
	for _, k := range ks {
		switch k.KeyType {
		case types.KeyTypeHash:
			hash = aws.ToString(k.AttributeName)
		case types.KeyTypeRange:
			rng = aws.ToString(k.AttributeName)
		}
	}
	if hash != attrPK || rng != attrSK {
		return fmt.Errorf("key schema is (hash %q, range %q), want (hash %q, range %q)", hash, rng, attrPK, attrSK)
	}
	return nil
}

func hasClusterIndex(desc *types.TableDescription) bool {
	for _, g := range desc.GlobalSecondaryIndexes {
		if aws.ToString(g.IndexName) == clusterIndex &&
			(g.IndexStatus == types.IndexStatusActive || g.IndexStatus == "") {
			return true
		}
	}
	return false
}

// createTable creates the table and waits for it. Another process creating it at
// the same time is fine.
func (r *driver) createTable(ctx context.Context) (*types.TableDescription, error) {
	s := types.ScalarAttributeTypeS
	_, err := r.client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:   aws.String(r.table),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(attrPK), AttributeType: s},
			{AttributeName: aws.String(attrSK), AttributeType: s},
			{AttributeName: aws.String(attrCluster), AttributeType: s},
			{AttributeName: aws.String(attrCSK), AttributeType: s},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(attrPK), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(attrSK), KeyType: types.KeyTypeRange},
		},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{{
			IndexName: aws.String(clusterIndex),
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String(attrCluster), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String(attrCSK), KeyType: types.KeyTypeRange},
			},
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll},
		}},
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return nil, fmt.Errorf("create dynamodb table %s: %w", r.table, err)
	}
	r.log.Info("dynamodb: created table", "table", r.table, "already_existed", err != nil)
	return r.waitActive(ctx)
}

// waitActive polls DescribeTable until the table is ACTIVE. It does not use the SDK's
// table-exists waiter: local emulators such as minidyn report no status at all, which
// the waiter never accepts, so a missing status counts as ready here.
func (r *driver) waitActive(ctx context.Context) (*types.TableDescription, error) {
	ctx, cancel := context.WithTimeout(ctx, activeTimeout)
	defer cancel()
	t := time.NewTicker(activePoll)
	defer t.Stop()
	for {
		desc, err := r.describe(ctx)
		var missing *types.ResourceNotFoundException
		switch {
		case errors.As(err, &missing):
			// DescribeTable can lag CreateTable briefly; keep polling.
		case err != nil:
			return nil, fmt.Errorf("wait for dynamodb table %s: %w", r.table, err)
		case desc.TableStatus == types.TableStatusActive || desc.TableStatus == "":
			return desc, nil
		case desc.TableStatus != types.TableStatusCreating && desc.TableStatus != types.TableStatusUpdating:
			return nil, fmt.Errorf("dynamodb table %s is %s, want ACTIVE", r.table, desc.TableStatus)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for dynamodb table %s to become ACTIVE: %w", r.table, ctx.Err())
		case <-t.C:
		}
	}
}

// enableTTL turns on DynamoDB's TTL on expires_at. Failure only costs storage —
// reads filter expired items themselves — so it is logged, not fatal.
func (r *driver) enableTTL(ctx context.Context) {
	out, err := r.client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(r.table)})
	if err == nil && out.TimeToLiveDescription != nil {
		d := out.TimeToLiveDescription
		on := d.TimeToLiveStatus == types.TimeToLiveStatusEnabled || d.TimeToLiveStatus == types.TimeToLiveStatusEnabling
		if on && aws.ToString(d.AttributeName) == attrExpiresAt {
			return
		}
		if on {
			r.log.Warn("dynamodb: table TTL is enabled on another attribute; expired endpoints will not be deleted",
				"table", r.table, "attribute", aws.ToString(d.AttributeName), "want", attrExpiresAt)
			return
		}
	}
	_, err = r.client.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(r.table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(attrExpiresAt), Enabled: aws.Bool(true),
		},
	})
	if err != nil {
		r.log.Warn("dynamodb: could not enable TTL; expired endpoints are hidden from reads but never deleted",
			"table", r.table, "attribute", attrExpiresAt, "err", err)
		return
	}
	r.log.Info("dynamodb: enabled TTL", "table", r.table, "attribute", attrExpiresAt)
}
