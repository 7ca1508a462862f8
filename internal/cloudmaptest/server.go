package cloudmaptest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
)

// Options tune the fake.
type Options struct {
	// PageSize caps the items of one List* page below the caller's MaxResults; 0 means
	// 100, Cloud Map's own maximum. Small values exercise paging.
	PageSize int
	// PendingPolls is how many GetOperation calls answer SUBMITTED or PENDING before an
	// operation finishes. 0 means 2; a negative value finishes it at the first poll.
	PendingPolls int
	// Region and Account appear in ARNs; defaults us-east-1 and 123456789012.
	Region  string
	Account string
}

func (o Options) withDefaults() Options {
	if o.PageSize <= 0 || o.PageSize > maxPage {
		o.PageSize = maxPage
	}
	switch {
	case o.PendingPolls == 0:
		o.PendingPolls = 2
	case o.PendingPolls < 0:
		o.PendingPolls = 0
	}
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	if o.Account == "" {
		o.Account = "123456789012"
	}
	return o
}

const (
	maxPage      = 100
	targetPrefix = "Route53AutoNaming_v20170314."
	contentType  = "application/x-amz-json-1.1"
)

// Server is a running fake. It is safe for concurrent use.
type Server struct {
	opts Options
	http *httptest.Server

	mu         sync.Mutex
	seq        uint64
	namespaces map[string]*namespace   // by id
	services   map[string]*service     // by id
	ops        map[string]*operation   // by id
	open       map[string][]*operation // unfinished, by instance id ("" for namespaces), in submission order
	requests   map[string]string       // creator request id -> operation id
	failNext   map[string]failure      // instance id -> how its next operation fails
	held       map[string]bool         // instance ids whose operations stay pending
	throttle   int                     // requests still to be throttled
	calls      map[string]int
}

type failure struct{ code, message string }

// NewServer starts a fake on 127.0.0.1. Close it when done.
func NewServer(opts Options) *Server {
	s := &Server{
		opts:       opts.withDefaults(),
		namespaces: map[string]*namespace{},
		services:   map[string]*service{},
		ops:        map[string]*operation{},
		open:       map[string][]*operation{},
		requests:   map[string]string{},
		failNext:   map[string]failure{},
		held:       map[string]bool{},
		calls:      map[string]int{},
	}
	s.http = httptest.NewServer(s)
	return s
}

// URL is the endpoint to give the SDK client (BaseEndpoint).
func (s *Server) URL() string { return s.http.URL }

// Close stops the server.
func (s *Server) Close() { s.http.Close() }

// FailNext makes the next operation on the instance finish with status FAIL and the
// given error code (e.g. INTERNAL_FAILURE) and message, without taking effect.
func (s *Server) FailNext(instanceID, code, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext[instanceID] = failure{code, message}
}

// Hold keeps operations on the instance pending (hold true) until released.
func (s *Server) Hold(instanceID string, hold bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if hold {
		s.held[instanceID] = true
	} else {
		delete(s.held, instanceID)
	}
}

// Throttle answers the next n requests with ThrottlingException.
func (s *Server) Throttle(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.throttle = n
}

// Calls returns how many requests named op (e.g. "ListInstances") were received,
// throttled and failed ones included.
func (s *Server) Calls(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

// ServeHTTP implements the AWS JSON 1.1 protocol.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op, err := checkRequest(r)
	if err != nil {
		writeError(w, err)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		writeError(w, &apiError{status: 400, code: "SerializationException", msg: err.Error()})
		return
	}
	handler, ok := handlers[op]
	s.mu.Lock()
	s.calls[op]++
	throttled := s.throttle > 0
	if throttled {
		s.throttle--
	}
	s.mu.Unlock()
	switch {
	case !ok:
		writeError(w, &apiError{status: 400, code: "UnknownOperationException", msg: "the fake does not implement " + op})
	case throttled:
		writeError(w, &apiError{status: 400, code: "ThrottlingException", msg: "Rate exceeded"})
	default:
		s.serve(w, handler, body)
	}
}

func (s *Server) serve(w http.ResponseWriter, h handler, body []byte) {
	out, err := s.call(h, body)
	if err != nil {
		writeError(w, err)
		return
	}
	b, err := json.Marshal(out)
	if err != nil {
		writeError(w, &apiError{status: 500, code: "InternalFailure", msg: err.Error()})
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("X-Amzn-RequestId", "fake")
	_, _ = w.Write(b)
}

// call runs a handler under the lock; the deferred unlock keeps a panicking handler
// (which net/http recovers) from wedging every later request.
func (s *Server) call(h handler, body []byte) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return h(s, body)
}

// checkRequest enforces what the real endpoint requires of every call and returns
// the operation name.
func checkRequest(r *http.Request) (string, error) {
	if r.Method != http.MethodPost || r.URL.Path != "/" {
		return "", &apiError{status: 404, code: "UnknownOperationException", msg: r.Method + " " + r.URL.Path}
	}
	if ct := r.Header.Get("Content-Type"); ct != contentType {
		return "", &apiError{status: 400, code: "SerializationException", msg: fmt.Sprintf("Content-Type %q, want %s", ct, contentType)}
	}
	auth := r.Header.Get("Authorization")
	if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 ") || !strings.Contains(auth, "/servicediscovery/aws4_request") {
		return "", &apiError{status: 403, code: "MissingAuthenticationTokenException", msg: "request is not SigV4-signed for servicediscovery"}
	}
	target := r.Header.Get("X-Amz-Target")
	op, ok := strings.CutPrefix(target, targetPrefix)
	if !ok || op == "" {
		return "", &apiError{status: 400, code: "UnknownOperationException", msg: fmt.Sprintf("X-Amz-Target %q", target)}
	}
	return op, nil
}

type handler func(s *Server, body []byte) (any, error)

var handlers = map[string]handler{
	"CreateHttpNamespace": (*Server).createHTTPNamespace,
	"GetNamespace":        (*Server).getNamespace,
	"ListNamespaces":      (*Server).listNamespaces,
	"CreateService":       (*Server).createService,
	"ListServices":        (*Server).listServices,
	"RegisterInstance":    (*Server).registerInstance,
	"DeregisterInstance":  (*Server).deregisterInstance,
	"GetInstance":         (*Server).getInstance,
	"ListInstances":       (*Server).listInstances,
	"GetOperation":        (*Server).getOperation,
}

// nextID returns a fresh id with the given prefix; callers hold s.mu.
func (s *Server) nextID(prefix string) string {
	s.seq++
	return fmt.Sprintf("%s%016x", prefix, s.seq)
}

func (s *Server) arn(kind, id string) string {
	return fmt.Sprintf("arn:aws:servicediscovery:%s:%s:%s/%s", s.opts.Region, s.opts.Account, kind, id)
}

// epoch renders a time the way AWS JSON 1.1 sends timestamps: seconds since the epoch.
func epoch(t time.Time) float64 { return float64(t.UnixMilli()) / 1000 }
