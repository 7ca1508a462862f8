package check

import (
	"strings"
	"testing"
	"time"
)

func TestSpecValidate(t *testing.T) {
	ok := Spec{Kind: HTTP, Target: "http://127.0.0.1:8080/healthz"}.WithDefaults()
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid spec rejected: %v", err)
	}
	if ok.Interval != DefaultInterval || ok.Timeout != DefaultTimeout || ok.Rise != 1 || ok.Fall != 1 {
		t.Errorf("defaults = %+v", ok)
	}
	if s := (Spec{Kind: TCP, Target: "127.0.0.1:1", Interval: time.Second}).WithDefaults(); s.Timeout != time.Second {
		t.Errorf("default timeout with a 1s interval = %s, want it capped at 1s", s.Timeout)
	}
	tests := []struct {
		name string
		spec Spec
		want string
	}{
		{"unknown kind", Spec{Kind: "udp", Target: "x"}, `kind "udp"`},
		{"http scheme", Spec{Kind: HTTP, Target: "ftp://x/"}, "http://"},
		{"http no host", Spec{Kind: HTTP, Target: "http:///x"}, "with a host"},
		{"tcp no port", Spec{Kind: TCP, Target: "127.0.0.1"}, "host:port"},
		{"tcp bad port", Spec{Kind: TCP, Target: "127.0.0.1:99999"}, "1..65535"},
		{"tcp no host", Spec{Kind: TCP, Target: ":80"}, "host is required"},
		{"grpc unbracketed v6", Spec{Kind: GRPC, Target: "::1:80"}, "host:port"},
		{"exec empty", Spec{Kind: Exec}, "exec:"},
		{"timeout over interval", Spec{Kind: TCP, Target: "a:1", Interval: time.Second, Timeout: 2 * time.Second}, "must not exceed interval"},
		{"negative interval", Spec{Kind: TCP, Target: "a:1", Interval: -1}, "interval"},
		{"rise", Spec{Kind: TCP, Target: "a:1", Rise: -1}, "rise -1"},
		{"fall", Spec{Kind: TCP, Target: "a:1", Fall: -2}, "fall -2"},
		{"status on tcp", Spec{Kind: TCP, Target: "a:1", ExpectStatus: 200}, "http checks only"},
		{"grpc_service on http", Spec{Kind: HTTP, Target: "http://a/", GRPCService: "x"}, "grpc checks only"},
		{"bad status", Spec{Kind: HTTP, Target: "http://a/", ExpectStatus: 42}, "expect_status 42"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.spec.WithDefaults() // negative thresholds stay negative
			err := s.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate(%+v) = %v, want an error containing %q", s, err, tc.want)
			}
			if _, nerr := New(s); nerr == nil {
				t.Fatal("New accepted an invalid spec")
			}
		})
	}
}
