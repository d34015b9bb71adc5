package testwait

import (
	"bytes"
	"sync"
)

// Buffer collects output that other goroutines write (a logger's, a
// process's) for a test to read, while they still write: an io.Writer safe
// for concurrent use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
