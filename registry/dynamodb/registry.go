package dynamodb

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/switchboard-mesh/switchboard/internal/awsaccess"
	"github.com/switchboard-mesh/switchboard/registry"
)

// Config says which table to use and how to reach it.
type Config struct {
	// Table is the table name; default DefaultTable.
	Table string
	// Region is the AWS region; default DefaultRegion.
	Region string
	// Endpoint overrides the region's endpoint, e.g. http://127.0.0.1:8000 for a
	// local server.
	Endpoint string
	// CreateTable creates the table in the documented shape if it is missing, and
	// enables its TTL attribute.
	CreateTable bool
	// Credentials overrides the standard AWS credential chain.
	Credentials aws.CredentialsProvider
	// InstanceRole allows credentials from the instance metadata service when no
	// AWS configuration is visible (internal/awsaccess).
	InstanceRole bool
	// MaxAttempts bounds the attempts of one request, the first included; default 5.
	MaxAttempts int
	// MaxBackoff caps the delay between attempts; default 2s.
	MaxBackoff time.Duration
	// PageSize is the Limit of each Query and Scan page; 0 leaves DynamoDB's 1 MB pages.
	PageSize int32
	Logger   *slog.Logger
}

var tableNameRE = regexp.MustCompile(`^[a-zA-Z0-9_.-]{3,255}$`)

func (c Config) withDefaults() (Config, error) {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.Region == "" {
		c.Region = DefaultRegion
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 5
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if !tableNameRE.MatchString(c.Table) {
		return c, fmt.Errorf("%s %q: must be 3 to 255 letters, digits, '_', '-' or '.'", ParamTable, c.Table)
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return c, fmt.Errorf("%s %q: want a URL such as http://127.0.0.1:8000", ParamEndpoint, c.Endpoint)
		}
	}
	if c.MaxAttempts < 1 || c.PageSize < 0 || c.MaxBackoff < 0 {
		return c, fmt.Errorf("dynamodb: MaxAttempts %d, MaxBackoff %s and PageSize %d must not be negative",
			c.MaxAttempts, c.MaxBackoff, c.PageSize)
	}
	return c, nil
}

// driver stores endpoints in a DynamoDB table, behind a registry.Front. It is safe
// for concurrent use.
type driver struct {
	client       *dynamodb.Client
	table        string
	clusterIndex bool // the GSI exists and is ACTIVE
	pageSize     int32
	log          *slog.Logger
	conns        *conns
	now          func() time.Time

	holds  holds
	reaper reaper
	// reapAfter is how long past its owner's expiry an entry is deleted (reap.go).
	reapAfter time.Duration
	// stop ends the holds' renewals at Close; wg counts them.
	stop     context.Context
	stopHold context.CancelFunc
	wg       sync.WaitGroup
}

var (
	_ registry.Driver = (*driver)(nil)
	_ registry.Holder = (*driver)(nil)
)

// Open connects to the table, creating it first if cfg.CreateTable is set.
func Open(ctx context.Context, cfg Config) (*registry.Front, error) {
	d, err := open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return registry.NewFront("dynamodb", d), nil
}

func open(ctx context.Context, cfg Config) (*driver, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	httpClient, conns := newHTTPClient()
	opts := []func(*config.LoadOptions) error{
		config.WithRegion(cfg.Region),
		config.WithHTTPClient(httpClient),
		config.WithRetryer(func() aws.Retryer { return newRetryer(cfg.MaxAttempts, cfg.MaxBackoff) }),
	}
	if cfg.Credentials != nil {
		opts = append(opts, config.WithCredentialsProvider(cfg.Credentials))
	}
	if err := awsaccess.Check(cfg.InstanceRole || cfg.Credentials != nil); err != nil {
		return nil, err
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("load AWS configuration: %w", err)
	}
	client := dynamodb.NewFromConfig(awsCfg, func(o *dynamodb.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
	})
	r := &driver{
		client: client, table: cfg.Table, pageSize: cfg.PageSize, log: cfg.Logger,
		conns: conns, now: time.Now, reapAfter: defaultReapAfter,
	}
	r.stop, r.stopHold = context.WithCancel(context.Background())
	if r.clusterIndex, err = r.prepareTable(ctx, cfg.CreateTable); err != nil {
		_ = r.Close()
		return nil, err
	}
	return r, nil
}

// Close ends the holds' renewals (their heartbeats then expire, as when their
// contexts end) and closes the connections. The Front has ended and waited for
// every call.
func (r *driver) Close() error {
	r.stopHold()
	r.wg.Wait()
	r.conns.closeAll()
	return nil
}
