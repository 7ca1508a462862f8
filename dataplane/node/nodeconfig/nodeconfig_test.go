package nodeconfig

import (
	"errors"
	"strings"
	"testing"
	"time"
)

const good = `node_id: n1
group: cloud
listen: 127.0.0.1:46357
external_endpoint: 127.0.0.1:46357
control_plane: [127.0.0.1:50052]
registry:
  backend: memory
limits:
  max_message_bytes: 4096
link_grace: 5s
link_transport: grpc
`

func TestParseGood(t *testing.T) {
	f, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if f.NodeID != "n1" || f.Group != "cloud" || f.Limits.MaxMessageBytes != 4096 || time.Duration(f.LinkGrace) != 5*time.Second || f.Registry.Backend != "memory" || f.LinkTransport != "grpc" {
		t.Fatalf("parsed %+v", f)
	}
}

func TestParseBad(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"", "empty"},
		{"node_id: n1\ngroup: g\nlisten: x:1\nbogus: 1\n", "field bogus not found"},
		{"group: g\nlisten: x:1\n", "node_id is required"},
		{"node_id: n1\ngroup: g\n", "listen is required"},
		{"node_id: n1\ngroup: 9g\nlisten: x:1\n", "group"},
		{"node_id: n1\ngroup: g\nlisten: nohost\n", `listen "nohost": want host:port`},
		{"node_id: n1\ngroup: g\nlisten: x:1\ncontrol_plane: [cp]\n", `control_plane[0] "cp"`},
		{"node_id: n1\ngroup: g\nlisten: x:1\nlink_grace: soon\n", "not a duration"},
		{"node_id: n1\ngroup: g\nlisten: x:1\nregistration: {type: shared_secret}\n", "exactly one of secret and secret_file"},
		{"node_id: n1\ngroup: g\nlisten: x:1\nregistration: {type: magic}\n", `registration.type "magic"`},
		{"node_id: n1\ngroup: g\nlisten: x:1\ntls: {cert_file: c.pem}\n", "cert_file and key_file go together"},
		{"node_id: n1\ngroup: g\nlisten: x:1\nlimits: {queue_len: -1}\n", "must not be negative"},
		{"node_id: n1\ngroup: g\nlisten: x:1\nlimits: {slow_consumer: block}\n", `limits.slow consumer policy "block": want disconnect or drop`},
		{"node_id: n1\ngroup: g\nlisten: x:1\npeer_identity_pattern: '^spiffe://(?P<group>[^/]+)/'\n", "named groups"},
		{"node_id: n1\ngroup: g\nlisten: x:1\npeer_identity_pattern: '('\n", "peer_identity_pattern"},
		{"node_id: n1\ngroup: g\nlisten: x:1\nlink_transport: quic\n", `link_transport "quic": want framed or grpc`},
	} {
		_, err := Parse([]byte(tc.doc))
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an invalid-config error containing %q", tc.doc, err, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(good))
	f.Add([]byte("node_id: n1\ngroup: g\nlisten: x:1\nlimits: {queue_len: -1}\n"))
	f.Add([]byte("{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err == nil && (c.NodeID == "" || c.Group == "" || c.Listen == "") {
			t.Fatalf("accepted a config without node_id, group or listen: %+v", c)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("error %v is not ErrInvalid", err)
		}
	})
}

// TestCheckListen: a listener beyond loopback that cannot tell who dials it
// (plaintext, or TLS without a client CA) is refused unless allow_insecure_remote
// says it is meant; loopback, and mTLS, are fine.
func TestCheckListen(t *testing.T) {
	tlsFiles := "tls: {ca_file: ca.pem, cert_file: n.pem, key_file: n-key.pem}\n"
	for _, tc := range []struct {
		doc     string
		refused bool
	}{
		{"listen: 0.0.0.0:46357\n", true},
		{"listen: 10.0.0.5:46357\n", true},
		{"listen: node.example.com:46357\n", true},
		{"listen: 0.0.0.0:46357\nallow_insecure_remote: true\n", false},
		{"listen: 127.0.0.1:46357\n", false},
		{"listen: '[::1]:46357'\n", false},
		{"listen: localhost:46357\n", false},
		{"listen: 0.0.0.0:46357\n" + tlsFiles, false},
		{"listen: 0.0.0.0:46357\ntls: {cert_file: n.pem, key_file: n-key.pem}\n", true},
		{"listen: 0.0.0.0:46357\ntls: {cert_file: n.pem, key_file: n-key.pem}\nallow_insecure_remote: true\n", false},
		{"listen: 0.0.0.0:46357\ntls: {spiffe_socket: unix:///run/spire.sock}\n", false},
	} {
		f, err := Parse([]byte("node_id: n1\ngroup: g\n" + tc.doc))
		if err != nil {
			t.Fatal(err)
		}
		err = f.CheckListen()
		if refused := errors.Is(err, ErrInsecureListen); refused != tc.refused || (refused && !strings.Contains(err.Error(), "allow_insecure_remote")) {
			t.Errorf("%q: CheckListen() = %v, want refused %v", tc.doc, err, tc.refused)
		}
	}
}
