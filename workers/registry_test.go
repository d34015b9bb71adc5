package workers_test

import (
	"context"
	"testing"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/workers"
)

type auditArgs struct{ workers.Args }

func (auditArgs) Kind() string { return "audit" }

// noop returns a worker of T that does nothing.
func noop[T river.JobArgs]() river.Worker[T] {
	return river.WorkFunc(func(context.Context, *river.Job[T]) error { return nil })
}

func TestAddWorkerRefusesABadBinding(t *testing.T) {
	t.Parallel()
	ws := workers.NewRegistry()
	require.NoError(t, workers.AddSafely(ws, noop[billingArgs](), &workers.AddOpts{MaxWorkers: 5}))
	require.ErrorContains(t, workers.AddSafely(ws, noop[billingArgs](), nil), `pool "billing" already has a worker`)
	require.ErrorContains(t, workers.AddSafely(ws, noop[auditArgs](), &workers.AddOpts{MaxWorkers: -1}), "MaxWorkers must be between 1 and 10000, got -1")
	require.Equal(t, []string{"billing"}, ws.Pools())
}
