package workers_test

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverbus/riverbus/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// exampleTB lets an Example get a test database from pgtest, which wants a
// testing.TB: it turns failures into panics and runs cleanups on done.
type exampleTB struct {
	testing.TB
	cleanups []func()
}

func (e *exampleTB) Helper()                           {}
func (e *exampleTB) Fatal(args ...any)                 { panic(fmt.Sprint(args...)) }
func (e *exampleTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (e *exampleTB) Cleanup(f func())                  { e.cleanups = append(e.cleanups, f) }

func (e *exampleTB) done() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
}

// exampleDB returns a fresh migrated database for an Example, and a function
// that drops it.
func exampleDB() (*pgxpool.Pool, func()) {
	tb := &exampleTB{}
	return pgtest.NewPool(tb), tb.done
}
