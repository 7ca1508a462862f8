package cloudmaptest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// apiError is an error answer: an HTTP status, the error code the SDK maps to a
// modeled error type, and extra members of that type (e.g. ServiceId).
type apiError struct {
	status int
	code   string
	msg    string
	extra  map[string]string
}

func (e *apiError) Error() string { return e.code + ": " + e.msg }

func invalid(format string, args ...any) *apiError {
	return &apiError{status: 400, code: "InvalidInput", msg: fmt.Sprintf(format, args...)}
}

func notFound(code, format string, args ...any) *apiError {
	return &apiError{status: 400, code: code, msg: fmt.Sprintf(format, args...)}
}

func writeError(w http.ResponseWriter, err error) {
	e, ok := err.(*apiError)
	if !ok {
		e = &apiError{status: 500, code: "InternalFailure", msg: err.Error()}
	}
	body := map[string]string{"__type": e.code, "Message": e.msg}
	for k, v := range e.extra {
		body[k] = v
	}
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("X-Amzn-ErrorType", e.code)
	w.WriteHeader(e.status)
	_, _ = w.Write(b)
}

// decode parses a request body strictly: a member the fake does not know is an
// error, so a client sending something the fake would silently ignore is caught.
func decode(body []byte, into any) error {
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return &apiError{status: 400, code: "SerializationException", msg: err.Error()}
	}
	return nil
}

// filter is the wire form of NamespaceFilter and ServiceFilter.
type filter struct {
	Name      string
	Values    []string
	Condition string
}

// match applies one filter to a value; the condition defaults to EQ.
func (f filter) match(v string) (bool, error) {
	switch f.Condition {
	case "", "EQ":
		if len(f.Values) != 1 {
			return false, invalid("filter %s: EQ takes exactly one value", f.Name)
		}
		return v == f.Values[0], nil
	case "IN":
		return slices.Contains(f.Values, v), nil
	case "BEGINS_WITH":
		if len(f.Values) != 1 {
			return false, invalid("filter %s: BEGINS_WITH takes exactly one value", f.Name)
		}
		return strings.HasPrefix(v, f.Values[0]), nil
	}
	return false, invalid("filter %s: condition %q is not supported", f.Name, f.Condition)
}

// pageLimit checks MaxResults and applies the server's own page size.
func (s *Server) pageLimit(maxResults *int) (int, error) {
	n := maxPage
	if maxResults != nil {
		if *maxResults < 1 || *maxResults > maxPage {
			return 0, invalid("MaxResults %d: must be 1..%d", *maxResults, maxPage)
		}
		n = *maxResults
	}
	return min(n, s.opts.PageSize), nil
}

// page returns the window of ids (sorted by the caller) that follows the token, and the token for the
// next window. Tokens name the last id returned (keyset paging), so entries added or
// removed between pages never make a page skip or repeat a survivor.
func page(ids []string, token *string, kind string, limit int) ([]string, *string, error) {
	start := 0
	if token != nil {
		after, err := parseToken(*token, kind)
		if err != nil {
			return nil, nil, err
		}
		start, _ = slices.BinarySearch(ids, after)
		if start < len(ids) && ids[start] == after {
			start++
		}
	}
	end := min(start+limit, len(ids))
	window := ids[start:end]
	if end == len(ids) || len(window) == 0 {
		return window, nil, nil
	}
	next := base64.RawURLEncoding.EncodeToString([]byte(kind + ":" + window[len(window)-1]))
	return window, &next, nil
}

func parseToken(token, kind string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return "", invalid("NextToken %q is not valid", token)
	}
	after, ok := strings.CutPrefix(string(b), kind+":")
	if !ok {
		return "", invalid("NextToken %q belongs to another listing", token)
	}
	return after, nil
}
