package dynamotest

import (
	"encoding/json"
	"net/http"
)

// Fault is an error response the server sends instead of serving a request.
type Fault struct {
	Status  int
	Code    string // the error type, e.g. ProvisionedThroughputExceededException
	Message string
	// Reasons are the CancellationReasons codes of a TransactionCanceledException,
	// one per transaction item ("None" for items that were fine).
	Reasons []string
	// Hang holds the request until the client gives up or the server closes.
	Hang bool
}

// Throttling is DynamoDB's answer when a table's throughput is exceeded.
func Throttling() Fault {
	return Fault{Status: http.StatusBadRequest, Code: "ProvisionedThroughputExceededException",
		Message: "The level of configured provisioned throughput for the table was exceeded."}
}

// InternalError is a DynamoDB 500.
func InternalError() Fault {
	return Fault{Status: http.StatusInternalServerError, Code: "InternalServerError", Message: "emulated internal error"}
}

// TransactionCanceled is a cancelled TransactWriteItems with one reason per item.
func TransactionCanceled(reasons ...string) Fault {
	return Fault{Status: http.StatusBadRequest, Code: "TransactionCanceledException",
		Message: "Transaction cancelled, please refer cancellation reasons for specific reasons", Reasons: reasons}
}

// Pass serves the request normally: queued before other faults, it lets the first
// requests of an operation through.
func Pass() Fault { return Fault{} }

func (f Fault) pass() bool { return f.Status == 0 && !f.Hang }

// Hang never answers; the request ends when the client cancels it.
func Hang() Fault { return Fault{Hang: true} }

// Fail makes the next n requests of operation op fail with f.
func (s *Server) Fail(op string, n int, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.faults[op] = append(s.faults[op], f)
	}
}

// ClearFaults drops every fault not yet delivered.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = map[string][]Fault{}
}

// takeFault pops the next fault for op; the caller holds s.mu.
func (s *Server) takeFault(op string) (Fault, bool) {
	q := s.faults[op]
	if len(q) == 0 {
		return Fault{}, false
	}
	s.faults[op] = q[1:]
	return q[0], true
}

func (f Fault) write(w http.ResponseWriter, r *http.Request, closing <-chan struct{}) {
	if f.Hang {
		select {
		case <-r.Context().Done():
		case <-closing:
		}
		return
	}
	if f.Reasons == nil {
		writeError(w, f.Status, f.Code, f.Message)
		return
	}
	type reason struct {
		Code    string
		Message string `json:",omitempty"`
	}
	body := struct {
		Type                string `json:"__type"`
		Message             string `json:"message"`
		CancellationReasons []reason
	}{Type: "com.amazonaws.dynamodb.v20120810#" + f.Code, Message: f.Message}
	for _, c := range f.Reasons {
		body.CancellationReasons = append(body.CancellationReasons, reason{Code: c})
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.WriteHeader(f.Status)
	_ = json.NewEncoder(w).Encode(body)
}
