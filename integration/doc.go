// Package integration holds the tests that run riverbus the way it is
// deployed: several processes (the riverbus binary and a test worker
// binary, built by the tests), kill -9 in the middle of batches, and a
// PostgreSQL restart, all against a real PostgreSQL the tests start.
package integration
