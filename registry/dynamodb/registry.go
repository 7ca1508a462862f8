package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

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

// Registry stores endpoints in a DynamoDB table. It is safe for concurrent use.
type Registry struct {
	client       *dynamodb.Client
	table        string
	clusterIndex bool // the GSI exists and is ACTIVE
	pageSize     int32
	log          *slog.Logger
	conns        *conns
	now          func() time.Time

	mu     sync.Mutex
	closed bool
	calls  sync.WaitGroup
	done   context.Context // cancelled by Close, cancelling calls in flight
	cancel context.CancelFunc
}

var _ registry.Registry = (*Registry)(nil)

// Open connects to the table, creating it first if cfg.CreateTable is set.
func Open(ctx context.Context, cfg Config) (*Registry, error) {
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
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("load AWS configuration: %w", err)
	}
	client := dynamodb.NewFromConfig(awsCfg, func(o *dynamodb.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
	})
	done, cancel := context.WithCancel(context.Background())
	r := &Registry{
		client: client, table: cfg.Table, pageSize: cfg.PageSize, log: cfg.Logger,
		conns: conns, now: time.Now, done: done, cancel: cancel,
	}
	if r.clusterIndex, err = r.prepareTable(ctx, cfg.CreateTable); err != nil {
		_ = r.Close()
		return nil, err
	}
	return r, nil
}

// begin admits a call unless the registry is closed, and ties its context to Close.
// The returned func must be called when the call ends.
func (r *Registry) begin(ctx context.Context) (context.Context, func(), error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, nil, registry.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	r.calls.Add(1)
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(r.done, cancel)
	return ctx, func() {
		stop()
		cancel()
		r.calls.Done()
	}, nil
}

// closedErr turns the cancellation of a call by Close into ErrClosed.
func (r *Registry) closedErr(err error) error {
	if r.done.Err() != nil && errors.Is(err, context.Canceled) {
		return fmt.Errorf("%w (during the call): %w", registry.ErrClosed, err)
	}
	return err
}

// Close cancels calls in flight, waits for them and closes its connections. It is
// idempotent; calls after it fail with registry.ErrClosed.
func (r *Registry) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	r.calls.Wait()
	r.conns.closeAll()
	return nil
}
