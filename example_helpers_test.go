package riverbus_test

import "fmt"

// exampleT is the riverbustest.TB of an Example: a failure panics, and the
// cleanups (dropping the test database) run at done.
type exampleT struct{ cleanups []func() }

func (*exampleT) Helper()                           {}
func (*exampleT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (e *exampleT) Cleanup(f func())                { e.cleanups = append(e.cleanups, f) }

func (e *exampleT) done() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
}
