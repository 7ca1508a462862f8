package dynamotest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	miniserver "github.com/truora/minidyn/server"
)

// Credentials the fake accepts; minidyn does not check signatures, but the SDK needs
// something to sign with.
const (
	Region          = "us-east-1"
	AccessKeyID     = "AKIDSWITCHBOARDTEST"
	SecretAccessKey = "switchboard-test-secret"
)

// maxTransactItems is DynamoDB's limit on the items of one TransactWriteItems call.
const maxTransactItems = 100

// Request is one request the server received.
type Request struct {
	Op    string // e.g. "Query", from the X-Amz-Target header
	Table string
	Index string // IndexName of a Query or Scan
	Items int    // TransactItems of a TransactWriteItems
}

// Server is minidyn behind an httptest server on 127.0.0.1.
type Server struct {
	// URL is the endpoint to point the SDK at (BaseEndpoint).
	URL string

	mini *miniserver.Server
	hs   *httptest.Server
	// admin orders table administration against data operations: minidyn's
	// CreateTable mutates its table map without holding its own lock.
	admin sync.RWMutex

	closing   chan struct{} // closed by Close: releases hanging requests
	closeOnce sync.Once

	mu       sync.Mutex
	requests []Request
	faults   map[string][]Fault
	statuses []string
	ttl      map[string]string
}

// New starts a server; Close stops it.
func New() *Server {
	s := &Server{
		mini:    miniserver.NewServer(),
		closing: make(chan struct{}),
		faults:  map[string][]Fault{},
		ttl:     map[string]string{},
	}
	s.hs = httptest.NewServer(s)
	s.URL = s.hs.URL
	return s
}

// Start starts a server that is closed when tb ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s := New()
	tb.Cleanup(s.Close)
	return s
}

// Close stops the server.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.closing)
		s.hs.Close()
	})
}

// SetEnv points the standard AWS credential chain of this test at static
// credentials and keeps it off the machine's AWS files and instance metadata, for
// tests that open the backend by name (registry.Open) as commands do.
func SetEnv(tb testing.TB) {
	tb.Helper()
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID":           AccessKeyID,
		"AWS_SECRET_ACCESS_KEY":       SecretAccessKey,
		"AWS_SESSION_TOKEN":           "",
		"AWS_PROFILE":                 "",
		"AWS_REGION":                  Region,
		"AWS_EC2_METADATA_DISABLED":   "true",
		"AWS_CONFIG_FILE":             "/nonexistent/switchboard-test/config",
		"AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/switchboard-test/credentials",
	} {
		tb.Setenv(k, v)
	}
}

// Params returns the registry parameters (flag values) that open the "dynamodb"
// backend on this server, creating table; use with SetEnv and registry.Open.
func (s *Server) Params(table string) map[string]string {
	return map[string]string{
		"dynamodb-endpoint":     s.URL,
		"dynamodb-table":        table,
		"dynamodb-create-table": "true",
		"aws-region":            Region,
	}
}

// Requests returns the requests received so far, in arrival order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Count returns how many requests of operation op were received.
func (s *Server) Count(op string) int {
	n := 0
	for _, r := range s.Requests() {
		if r.Op == op {
			n++
		}
	}
	return n
}

// ResetRequests forgets the requests received so far.
func (s *Server) ResetRequests() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = nil
}

// TTLAttribute returns the attribute UpdateTimeToLive enabled on table, or "".
func (s *Server) TTLAttribute(table string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ttl[table]
}

// DescribeTableStatus makes the next DescribeTable responses report these table
// statuses, one per response; afterwards minidyn's own answer (no status) returns.
func (s *Server) DescribeTableStatus(statuses ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.statuses = append(s.statuses, statuses...)
}

// ServeHTTP records the request, applies injected faults and the fixes listed in the
// package documentation, and hands the rest to minidyn. Like DynamoDB, it sends the
// CRC32 of every response body in X-Amz-Crc32, which the SDK checks.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := httptest.NewRecorder()
	if hung := s.serve(rec, r); hung {
		return
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.Header().Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(rec.Body.Bytes())), 10))
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) (hung bool) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	req := parseRequest(r.Header.Get("X-Amz-Target"), body)
	s.mu.Lock()
	s.requests = append(s.requests, req)
	f, faulted := s.takeFault(req.Op)
	s.mu.Unlock()
	if faulted && !f.pass() {
		f.write(w, r, s.closing)
		return f.Hang
	}
	switch req.Op {
	case "UpdateTimeToLive", "DescribeTimeToLive":
		s.serveTTL(w, req.Op, body)
		return false
	case "TransactWriteItems":
		if req.Items > maxTransactItems {
			writeError(w, http.StatusBadRequest, "ValidationException",
				fmt.Sprintf("Member must have length less than or equal to %d (got %d transact items)", maxTransactItems, req.Items))
			return false
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if isAdmin(req.Op) {
		s.admin.Lock()
		defer s.admin.Unlock()
	} else {
		s.admin.RLock()
		defer s.admin.RUnlock()
	}
	if req.Op == "DescribeTable" {
		s.describeTable(w, r)
		return false
	}
	s.mini.ServeHTTP(w, r)
	return false
}

func isAdmin(op string) bool {
	switch op {
	case "CreateTable", "DeleteTable", "UpdateTable", "DescribeTable":
		return true
	}
	return false
}

func parseRequest(target string, body []byte) Request {
	var in struct {
		TableName     string
		IndexName     string
		TransactItems []json.RawMessage
	}
	_ = json.Unmarshal(body, &in) // a malformed body is minidyn's to reject
	return Request{
		Op:    target[strings.LastIndex(target, ".")+1:],
		Table: in.TableName,
		Index: in.IndexName,
		Items: len(in.TransactItems),
	}
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": "com.amazonaws.dynamodb.v20120810#" + code, "message": msg})
}
