// Package yamlpos finds where a YAML syntax error is.
//
// gopkg.in/yaml.v3, which the config and manifest parsers walk node by node, reports
// a syntax error at the line where the enclosing block starts: a mis-indented key
// deep in a file is "line 1". A second parser that records the position of the
// offending token tells the user where to look.
package yamlpos

import (
	"errors"
	"fmt"

	goccy "github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/parser"
)

// SyntaxError is a YAML syntax error at a line and column (both 1-based).
type SyntaxError struct {
	Line, Column int
	Msg          string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("line %d, column %d: %s", e.Line, e.Column, e.Msg)
}

// Locate returns where data's first syntax error is, or nil when the locating parser
// finds none (the caller then keeps its own parser's error).
func Locate(data []byte) *SyntaxError {
	_, err := parser.ParseBytes(data, 0)
	var se *goccy.SyntaxError
	if err == nil || !errors.As(err, &se) || se.Token == nil || se.Token.Position == nil {
		return nil
	}
	return &SyntaxError{Line: se.Token.Position.Line, Column: se.Token.Position.Column, Msg: se.Message}
}
