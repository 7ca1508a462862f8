package check

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Checker runs one probe. A nil error means OK; the error says what failed.
type Checker interface {
	Check(ctx context.Context) error
}

// New returns the checker for a valid spec. Each probe opens its own connection and
// closes it: probes run seconds apart, and nothing is left running between them.
func New(s Spec) (Checker, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	switch s.Kind {
	case HTTP:
		return newHTTP(s), nil
	case TCP:
		return tcpChecker{addr: s.Target}, nil
	case GRPC:
		return grpcChecker{addr: s.Target, service: s.GRPCService}, nil
	default:
		return execChecker{argv: s.Argv}, nil
	}
}

// maxBody bounds how much of an HTTP body or command output is read.
const maxBody = 64 << 10

type httpChecker struct {
	url    string
	status int
	body   []byte
	client *http.Client
}

func newHTTP(s Spec) httpChecker {
	// No keep-alive: an idle pooled connection would outlive the check for nothing.
	tr := &http.Transport{DisableKeepAlives: true, Proxy: nil}
	return httpChecker{url: s.Target, status: s.ExpectStatus, body: []byte(s.ExpectBody), client: &http.Client{Transport: tr}}
}

func (c httpChecker) Check(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "switchboard-agent")
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	if c.status != 0 && resp.StatusCode != c.status {
		return fmt.Errorf("status %d, want %d", resp.StatusCode, c.status)
	}
	if c.status == 0 && (resp.StatusCode < 200 || resp.StatusCode > 299) {
		return fmt.Errorf("status %d, want 2xx", resp.StatusCode)
	}
	if len(c.body) > 0 && !bytes.Contains(body, c.body) {
		return fmt.Errorf("body does not contain %q", c.body)
	}
	return nil
}

type tcpChecker struct{ addr string }

func (c tcpChecker) Check(ctx context.Context) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return err
	}
	return conn.Close()
}

type grpcChecker struct{ addr, service string }

func (c grpcChecker) Check(ctx context.Context) error {
	conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: c.service})
	if err != nil {
		return err
	}
	if s := resp.GetStatus(); s != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health status %s", s)
	}
	return nil
}

type execChecker struct{ argv []string }

func (c execChecker) Check(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, c.argv[0], c.argv[1:]...)
	out := &limitedBuffer{max: maxBody}
	cmd.Stdout, cmd.Stderr = out, out
	// A child that keeps the output pipe open after being killed must not hold the
	// check past its timeout.
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if err == nil {
		return nil
	}
	msg := strings.TrimSpace(out.String())
	var exit *exec.ExitError
	if errors.As(err, &exit) && msg != "" {
		return fmt.Errorf("%w: %s", err, msg)
	}
	return err
}

type limitedBuffer struct {
	bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
