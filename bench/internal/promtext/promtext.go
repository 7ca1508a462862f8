// Package promtext reads one sample from a Prometheus text endpoint, for the
// benchmark programs that watch their children's metrics. It imports nothing of
// Switchboard's.
package promtext

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Fetch reads the unlabelled sample name from the metrics served at url.
func Fetch(ctx context.Context, client *http.Client, url, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: %s", url, resp.Status)
	}
	v, err := Value(resp.Body, name)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", url, err)
	}
	return v, nil
}

// Value finds the unlabelled sample name in Prometheus's text format.
func Value(r io.Reader, name string) (float64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), name+" ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		return f, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no %s in the metrics", name)
}
