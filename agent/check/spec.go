package check

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Kind names what a check probes.
type Kind string

const (
	HTTP Kind = "http"
	TCP  Kind = "tcp"
	GRPC Kind = "grpc"
	Exec Kind = "exec"
)

// Defaults applied by WithDefaults.
const (
	DefaultInterval = 10 * time.Second
	DefaultTimeout  = 2 * time.Second
	DefaultRise     = 1
	DefaultFall     = 1
)

// Spec describes one health check.
type Spec struct {
	Kind Kind
	// Target is the URL (HTTP) or host:port (TCP, gRPC).
	Target string
	// Argv is the command and its arguments (Exec); it runs without a shell.
	Argv []string
	// GRPCService is the service name sent in the gRPC health request; "" asks about
	// the server as a whole.
	GRPCService string
	// ExpectStatus is the HTTP status that counts as OK; 0 accepts any 2xx.
	ExpectStatus int
	// ExpectBody, when set, must occur in the HTTP response body.
	ExpectBody string
	// Interval is the time between runs; Timeout bounds one run and must not exceed it.
	Interval, Timeout time.Duration
	// Rise is how many consecutive passes make an unhealthy check healthy, Fall how
	// many consecutive failures make a healthy one unhealthy.
	Rise, Fall int
}

// WithDefaults fills unset timing and thresholds. A timeout longer than the interval
// is left for Validate to report; an unset timeout is capped at the interval.
func (s Spec) WithDefaults() Spec {
	if s.Interval == 0 {
		s.Interval = DefaultInterval
	}
	if s.Timeout == 0 {
		s.Timeout = min(DefaultTimeout, s.Interval)
	}
	if s.Rise == 0 {
		s.Rise = DefaultRise
	}
	if s.Fall == 0 {
		s.Fall = DefaultFall
	}
	return s
}

// Validate reports the first broken rule; the error names the field.
func (s Spec) Validate() error {
	if err := s.validateTarget(); err != nil {
		return err
	}
	switch {
	case s.Interval <= 0:
		return fmt.Errorf("interval %s: must be positive", s.Interval)
	case s.Timeout <= 0:
		return fmt.Errorf("timeout %s: must be positive", s.Timeout)
	case s.Timeout > s.Interval:
		return fmt.Errorf("timeout %s: must not exceed interval %s", s.Timeout, s.Interval)
	case s.Rise < 1:
		return fmt.Errorf("rise %d: must be at least 1", s.Rise)
	case s.Fall < 1:
		return fmt.Errorf("fall %d: must be at least 1", s.Fall)
	}
	if s.Kind != HTTP && (s.ExpectStatus != 0 || s.ExpectBody != "") {
		return fmt.Errorf("expect_status and expect_body apply to http checks only, not %s", s.Kind)
	}
	if s.Kind != GRPC && s.GRPCService != "" {
		return fmt.Errorf("grpc_service applies to grpc checks only, not %s", s.Kind)
	}
	if s.ExpectStatus != 0 && (s.ExpectStatus < 100 || s.ExpectStatus > 599) {
		return fmt.Errorf("expect_status %d: must be an HTTP status 100..599", s.ExpectStatus)
	}
	return nil
}

func (s Spec) validateTarget() error {
	switch s.Kind {
	case HTTP:
		return validateURL(s.Target)
	case TCP, GRPC:
		return validateHostPort(string(s.Kind), s.Target)
	case Exec:
		if len(s.Argv) == 0 || s.Argv[0] == "" {
			return errors.New("exec: want a command and its arguments, e.g. [/usr/bin/check, --quick]")
		}
		return nil
	}
	return fmt.Errorf("kind %q: want one of http, tcp, grpc, exec", s.Kind)
}

func validateURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("http %q: %w", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("http %q: want an http:// or https:// URL with a host", s)
	}
	return nil
}

func validateHostPort(kind, s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%s %q: want host:port ([addr]:port for IPv6)", kind, s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%s %q: port must be 1..65535", kind, s)
	}
	if host == "" {
		return fmt.Errorf("%s %q: host is required", kind, s)
	}
	return nil
}

// String describes the check for logs and metrics, e.g. "http http://127.0.0.1/healthz".
func (s Spec) String() string {
	if s.Kind == Exec {
		return "exec " + strings.Join(s.Argv, " ")
	}
	return string(s.Kind) + " " + s.Target
}
