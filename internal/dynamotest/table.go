package dynamotest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
)

// serveTTL answers UpdateTimeToLive and DescribeTimeToLive, which minidyn lacks,
// for tables minidyn knows.
func (s *Server) serveTTL(w http.ResponseWriter, op string, body []byte) {
	var in struct {
		TableName               string
		TimeToLiveSpecification struct {
			AttributeName string
			Enabled       bool
		}
	}
	if err := json.Unmarshal(body, &in); err != nil {
		writeError(w, http.StatusBadRequest, "SerializationException", err.Error())
		return
	}
	if !s.tableExists(in.TableName) {
		writeError(w, http.StatusBadRequest, "ResourceNotFoundException", "Requested resource not found: Table: "+in.TableName+" not found")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out any
	if op == "UpdateTimeToLive" {
		spec := in.TimeToLiveSpecification
		if spec.Enabled {
			s.ttl[in.TableName] = spec.AttributeName
		} else {
			delete(s.ttl, in.TableName)
		}
		out = map[string]any{"TimeToLiveSpecification": spec}
	} else {
		desc := map[string]string{"TimeToLiveStatus": "DISABLED"}
		if a := s.ttl[in.TableName]; a != "" {
			desc = map[string]string{"TimeToLiveStatus": "ENABLED", "AttributeName": a}
		}
		out = map[string]any{"TimeToLiveDescription": desc}
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	_ = json.NewEncoder(w).Encode(out)
}

func (s *Server) tableExists(table string) bool {
	s.admin.RLock()
	defer s.admin.RUnlock()
	body, _ := json.Marshal(map[string]string{"TableName": table})
	r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	r.Header.Set("X-Amz-Target", "DynamoDB_20120810.DescribeTable")
	rec := httptest.NewRecorder()
	s.mini.ServeHTTP(rec, r)
	return rec.Code == http.StatusOK
}

// describeTable serves DescribeTable through minidyn and, when a status was queued
// with DescribeTableStatus, sets it in the answer. The caller holds s.admin.
func (s *Server) describeTable(w http.ResponseWriter, r *http.Request) {
	rec := httptest.NewRecorder()
	s.mini.ServeHTTP(rec, r)
	s.mu.Lock()
	status := ""
	if len(s.statuses) > 0 && rec.Code == http.StatusOK {
		status, s.statuses = s.statuses[0], s.statuses[1:]
	}
	s.mu.Unlock()
	body := rec.Body.Bytes()
	if status != "" {
		var out map[string]map[string]any
		if err := json.Unmarshal(body, &out); err == nil && out["Table"] != nil {
			out["Table"]["TableStatus"] = status
			body, _ = json.Marshal(out)
		}
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(body)
}
