package wire

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of switchboard.registrar.v1.WatchEndpointsRequest.
const (
	WatchFieldCluster     protowire.Number = 1
	WatchFieldNode        protowire.Number = 2
	WatchFieldLastVersion protowire.Number = 3
	WatchFieldServices    protowire.Number = 4
	WatchFieldScopeID     protowire.Number = 5
	WatchFieldAll         protowire.Number = 6
	WatchFieldBatches     protowire.Number = 7
	WatchFieldCompressed  protowire.Number = 8
	WatchFieldSession     protowire.Number = 9
)

// WatchRequest is a switchboard.registrar.v1.WatchEndpointsRequest, decoded by
// hand into a value: the registrar's watch handlers decode their request on the
// stream's goroutine, and a proto message allocated there costs that goroutine
// stack. Its getters are the generated message's.
type WatchRequest struct {
	ClusterName, NodeName, LastVersion string
	Services                           []string
	ScopeID                            uint64
	AllServices, AcceptBatches         bool
	AcceptCompressed                   bool
	Session                            string
}

// GetClusterName returns the request's cluster_name.
func (q WatchRequest) GetClusterName() string { return q.ClusterName }

// GetNodeName returns the request's node_name.
func (q WatchRequest) GetNodeName() string { return q.NodeName }

// GetLastVersion returns the request's last_version.
func (q WatchRequest) GetLastVersion() string { return q.LastVersion }

// GetServices returns the request's services.
func (q WatchRequest) GetServices() []string { return q.Services }

// GetScopeId returns the request's scope_id (named as the generated getter is).
func (q WatchRequest) GetScopeId() uint64 { return q.ScopeID } //nolint:revive // the generated message's name

// GetAllServices returns the request's all_services.
func (q WatchRequest) GetAllServices() bool { return q.AllServices }

// GetAcceptBatches returns the request's accept_batches.
func (q WatchRequest) GetAcceptBatches() bool { return q.AcceptBatches }

// GetAcceptCompressed returns the request's accept_compressed.
func (q WatchRequest) GetAcceptCompressed() bool { return q.AcceptCompressed }

// GetSession returns the request's session.
func (q WatchRequest) GetSession() string { return q.Session }

// InvalidUTF8Error is a string field of a request that is not valid UTF-8; Field
// names it as internal/rpcinput does (services[1] for the second service).
type InvalidUTF8Error struct{ Field string }

func (e *InvalidUTF8Error) Error() string { return e.Field + ": invalid UTF-8" }

// DecodeWatchRequest decodes a WatchEndpointsRequest as proto.Unmarshal would:
// unknown fields, and known ones of another wire type, are skipped. A string that
// is not valid UTF-8 is an *InvalidUTF8Error; any other error is malformed input.
func DecodeWatchRequest(b []byte) (WatchRequest, error) {
	var q WatchRequest
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return q, protowire.ParseError(n)
		}
		if num > protowire.MaxValidNumber { // ConsumeTag checks only the low bound
			return q, fmt.Errorf("field number %d out of range", num)
		}
		b = b[n:]
		switch {
		case typ == protowire.BytesType && (num >= WatchFieldCluster && num <= WatchFieldServices || num == WatchFieldSession):
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return q, protowire.ParseError(m)
			}
			b = b[m:]
			if !utf8.Valid(v) {
				return q, &InvalidUTF8Error{Field: watchFieldName(num, len(q.Services))}
			}
			switch num {
			case WatchFieldCluster:
				q.ClusterName = string(v)
			case WatchFieldNode:
				q.NodeName = string(v)
			case WatchFieldLastVersion:
				q.LastVersion = string(v)
			case WatchFieldSession:
				q.Session = string(v)
			default:
				q.Services = append(q.Services, string(v))
			}
		case typ == protowire.VarintType && num >= WatchFieldScopeID && num <= WatchFieldCompressed:
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return q, protowire.ParseError(m)
			}
			b = b[m:]
			switch num {
			case WatchFieldScopeID:
				q.ScopeID = v
			case WatchFieldAll:
				q.AllServices = v != 0
			case WatchFieldBatches:
				q.AcceptBatches = v != 0
			default:
				q.AcceptCompressed = v != 0
			}
		default:
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return q, protowire.ParseError(m)
			}
			b = b[m:]
		}
	}
	return q, nil
}

// watchFieldName names string field num; services is the number of services
// already decoded (the index of the one at hand).
func watchFieldName(num protowire.Number, services int) string {
	switch num {
	case WatchFieldCluster:
		return "cluster_name"
	case WatchFieldNode:
		return "node_name"
	case WatchFieldLastVersion:
		return "last_version"
	case WatchFieldSession:
		return "session"
	}
	return fmt.Sprintf("services[%d]", services)
}
