// Package riverbustest tests an application's riverbus handlers against a
// real PostgreSQL, the way riverbus tests itself: each test gets a fresh
// database with the riverbus schema, and waits for its events to be handled
// through the pool's checkpoint rather than with sleeps.
//
// # Sections
//
//   - Setup: Main, Run, EnvURL
//   - Databases: NewDatabase, NewDatabaseURL
//   - Pools: CreatePool
//   - Clients and waiting: StartClient, WaitForSequence
//
// # Setup
//
// Main, called from TestMain, starts one throwaway PostgreSQL server for
// the whole test binary (initdb into a temporary directory, a free loopback
// port; as root, the server runs as the "postgres" user), migrates a
// template database once, and removes everything when the tests end. Set
// RIVERBUS_TEST_DATABASE_URL (EnvURL) to use an existing server instead.
//
//	func TestMain(m *testing.M) { riverbustest.Main(m) }
//
// # Databases
//
// NewDatabase returns a pool connected to a fresh, migrated database that
// is dropped when the test ends, so tests may run in parallel:
//
//	func TestBillingBooksInvoices(t *testing.T) {
//		t.Parallel()
//		db := riverbustest.NewDatabase(t)
//		...
//	}
//
// # Pools
//
// CreatePool creates a pool as `riverbus pool create` would, so a test
// needs no operator client:
//
//	riverbustest.CreatePool(t, db, bustype.PoolParams{Name: "billing", Ordering: bustype.OrderingKey})
//
// A handler that uses workers.RunExactlyOnce also runs under River's
// rivertest.Worker when it is given the test's transaction as its
// workers.DB (see RunExactlyOnce).
//
// # Clients and waiting
//
// StartClient starts a riverbus.Client (fan-out and the workers in its
// Config) that stops when the test ends. WaitForSequence waits until a
// pool's checkpoint reaches a sequence (every job of the pool for an event at
// or below it finished), failing the test after a timeout with what holds
// the pool:
//
//	appended, _ := outbox.Append(ctx, db, outbox.Event{Type: "invoice.paid", Data: data})
//	riverbustest.WaitForSequence(t, client, "billing", appended[0].GlobalSequence, 10*time.Second)
//	// assert on what the handler wrote
//
// The helpers take a TB, which testing.TB satisfies; an Example can pass
// its own (see the examples of package riverbus).
package riverbustest
