// Package yamlpos finds where a YAML syntax error is.
//
// gopkg.in/yaml.v3, which the config and manifest parsers walk node by node, reports
// many syntax errors at the line where the enclosing block starts: a mis-indented
// key deep in a file is "line 1". A second parser that records the position of the
// offending token tells the user where to look.
package yamlpos

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"

	goccy "github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/parser"
)

// SyntaxError is a YAML syntax error at a line and column (1-based; Column is 0
// when only the line is known).
type SyntaxError struct {
	Line, Column int
	Msg          string
}

func (e *SyntaxError) Error() string {
	if e.Column == 0 {
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	}
	return fmt.Sprintf("line %d, column %d: %s", e.Line, e.Column, e.Msg)
}

var yamlV3Line = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// Locate places the syntax error yamlErr (from yaml.v3) that data caused. Each
// parser is right where the other is wrong: yaml.v3 names the line of a scanner
// error exactly but places a parser error at the top of its block; the locating
// parser places a parser error at its token but a scanner error at the plain value
// the bad line continues. The later of the two positions is where the mistake is.
// Nil when neither parser can place it.
func Locate(data []byte, yamlErr error) *SyntaxError {
	var v3 *SyntaxError
	if m := yamlV3Line.FindStringSubmatch(errText(yamlErr)); m != nil {
		line, _ := strconv.Atoi(m[1])
		v3 = &SyntaxError{Line: line, Msg: m[2]}
	}
	_, err := parser.ParseBytes(data, 0)
	var se *goccy.SyntaxError
	if err == nil || !errors.As(err, &se) || se.Token == nil || se.Token.Position == nil {
		return v3
	}
	at := &SyntaxError{Line: se.Token.Position.Line, Column: se.Token.Position.Column, Msg: se.Message}
	if v3 != nil && v3.Line > at.Line {
		return v3
	}
	return at
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
