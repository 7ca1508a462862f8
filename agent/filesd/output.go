package filesd

import (
	"context"
	"fmt"

	"github.com/switchboard-mesh/switchboard/agent/internal/atomicfile"
	"github.com/switchboard-mesh/switchboard/endpoint"
)

// Output keeps one file_sd file up to date.
type Output struct {
	Path string
}

// Name identifies the output in logs and metrics.
func (o *Output) Name() string { return "file_sd:" + o.Path }

// Update rewrites the file, atomically, when the target groups for eps differ from
// what it holds, and reports whether it wrote.
func (o *Output) Update(_ context.Context, eps []endpoint.Endpoint) (bool, error) {
	data, err := Build(eps)
	if err != nil {
		return false, fmt.Errorf("file_sd %s: %w", o.Path, err)
	}
	wrote, err := atomicfile.WriteIfChanged(o.Path, data)
	if err != nil {
		return false, fmt.Errorf("file_sd: %w", err)
	}
	return wrote, nil
}
