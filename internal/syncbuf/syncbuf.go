// Package syncbuf is a bytes.Buffer that goroutines may write while a test reads
// it: the sink for the logs and output of servers a test runs.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is safe for concurrent use; the zero value is empty and ready.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what has been written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
