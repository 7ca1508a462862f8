package jaegertest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Trace is one trace as Jaeger's query API returns it.
type Trace struct {
	ID    string
	Spans []Span
}

// Span is a span as Jaeger stored it.
type Span struct {
	TraceID, SpanID string
	// ParentID is the span its CHILD_OF reference names, "" for a root; its trace
	// is always the span's own (a CHILD_OF another trace is in Links).
	ParentID string
	// Name is the span's name (Jaeger's operationName).
	Name string
	// Service is the service.name of the process that recorded it.
	Service string
	// Kind is the span.kind tag: internal, server, client, producer or consumer.
	Kind string
	// Tags are the span's attributes, each value as text.
	Tags map[string]string
	// Links are its references but the parent: OpenTelemetry's span links, which
	// Jaeger stores as FOLLOWS_FROM references.
	Links    []Ref
	Start    time.Time
	Duration time.Duration
}

// Ref is a reference from one span to another, in Jaeger's terms.
type Ref struct {
	Type            string // CHILD_OF or FOLLOWS_FROM
	TraceID, SpanID string
}

// Span returns the trace's span named name recorded by service ("": any), and
// whether there is one; with several it returns the first Jaeger listed.
func (t Trace) Span(service, name string) (Span, bool) {
	for _, s := range t.Spans {
		if s.Name == name && (service == "" || s.Service == service) {
			return s, true
		}
	}
	return Span{}, false
}

// ByID returns the trace's span with id, and whether there is one.
func (t Trace) ByID(id string) (Span, bool) {
	for _, s := range t.Spans {
		if s.SpanID == id {
			return s, true
		}
	}
	return Span{}, false
}

// The query API's JSON (Jaeger's /api/traces, the UI's API).
type (
	apiTraces struct {
		Data   []apiTrace `json:"data"`
		Errors []struct {
			Code int    `json:"code"`
			Msg  string `json:"msg"`
		} `json:"errors"`
	}
	apiTrace struct {
		TraceID   string                `json:"traceID"`
		Spans     []apiSpan             `json:"spans"`
		Processes map[string]apiProcess `json:"processes"`
	}
	apiSpan struct {
		TraceID       string   `json:"traceID"`
		SpanID        string   `json:"spanID"`
		OperationName string   `json:"operationName"`
		References    []apiRef `json:"references"`
		StartTime     int64    `json:"startTime"` // µs since the epoch
		Duration      int64    `json:"duration"`  // µs
		Tags          []apiTag `json:"tags"`
		ProcessID     string   `json:"processID"`
	}
	apiRef struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	}
	apiTag struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	}
	apiProcess struct {
		ServiceName string `json:"serviceName"`
	}
)

// Services lists the services Jaeger has spans of.
func (j *Jaeger) Services(ctx context.Context) ([]string, error) {
	var out struct {
		Data []string `json:"data"`
	}
	if err := j.get(ctx, "/api/services", &out); err != nil {
		return nil, err
	}
	return out.Data, nil
}

// Traces returns up to limit recent traces with a span of service (within the
// last hour).
func (j *Jaeger) Traces(ctx context.Context, service string, limit int) ([]Trace, error) {
	q := url.Values{"service": {service}, "limit": {strconv.Itoa(limit)}, "lookback": {"1h"}}
	var out apiTraces
	if err := j.get(ctx, "/api/traces?"+q.Encode(), &out); err != nil {
		return nil, err
	}
	return convert(out)
}

// Trace returns the trace with id (32 hex digits); an error if Jaeger has none.
func (j *Jaeger) Trace(ctx context.Context, id string) (Trace, error) {
	var out apiTraces
	if err := j.get(ctx, "/api/traces/"+url.PathEscape(id), &out); err != nil {
		return Trace{}, err
	}
	ts, err := convert(out)
	if err != nil {
		return Trace{}, err
	}
	if len(ts) != 1 {
		return Trace{}, fmt.Errorf("trace %s: %d traces in the answer", id, len(ts))
	}
	return ts[0], nil
}

func (j *Jaeger) get(ctx context.Context, path string, v any) error {
	ctx, cancel := ctxOrTimeout(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.QueryURL+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("jaeger GET %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("jaeger GET %s: %w", path, err)
	}
	return nil
}

func convert(in apiTraces) ([]Trace, error) {
	if len(in.Errors) > 0 {
		return nil, fmt.Errorf("jaeger: %d: %s", in.Errors[0].Code, in.Errors[0].Msg)
	}
	out := make([]Trace, 0, len(in.Data))
	for _, at := range in.Data {
		t := Trace{ID: at.TraceID}
		for _, as := range at.Spans {
			s := Span{
				TraceID: as.TraceID, SpanID: as.SpanID, Name: as.OperationName,
				Service: at.Processes[as.ProcessID].ServiceName, Tags: map[string]string{},
				Start: time.UnixMicro(as.StartTime), Duration: time.Duration(as.Duration) * time.Microsecond,
			}
			for _, tag := range as.Tags {
				s.Tags[tag.Key] = fmt.Sprint(tag.Value)
			}
			s.Kind = s.Tags["span.kind"]
			for _, r := range as.References {
				if r.RefType == "CHILD_OF" && r.TraceID == as.TraceID && s.ParentID == "" {
					s.ParentID = r.SpanID
					continue
				}
				s.Links = append(s.Links, Ref{Type: r.RefType, TraceID: r.TraceID, SpanID: r.SpanID})
			}
			t.Spans = append(t.Spans, s)
		}
		out = append(out, t)
	}
	return out, nil
}
