package workers

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"
)

// fetchSettleTimeout bounds the statements a fetch runs once River's own
// bound on it may have passed: the commit of rows already in hand, the
// rollback of a fetch that failed, and the look at a commit whose outcome
// is unknown.
const fetchSettleTimeout = 10 * time.Second

// fetchExecutor is River's executor whose fetch commits only once the
// fetched rows are in hand (docs/design.md §9).
//
// River fetches with one UPDATE … RETURNING that marks the jobs running
// and gives the statement 10 s. When that time runs out, pgx closes the
// connection and asks the server to cancel the statement; but a statement
// that finishes before the cancel lands (a loaded server, a proxy that
// drops cancel requests) commits, as it ran alone, and its jobs are
// running with no worker until River's rescuer takes them, minutes later
// (RescueStuckJobsAfter). Run in a transaction, the same fetch cut short
// rolls back when the connection goes, and its jobs are fetched again at
// once. Only the COMMIT's own reply can still be lost: the fetch then
// looks at its jobs and keeps those the database shows it holding.
type fetchExecutor struct {
	riverdriver.Executor
	logger *slog.Logger
}

// JobGetAvailable fetches in a transaction that commits once the rows are
// in hand, whatever is left of River's bound on the fetch.
func (e *fetchExecutor) JobGetAvailable(ctx context.Context, params *riverdriver.JobGetAvailableParams) (*riverdriver.JobGetAvailableResult, error) {
	tx, err := e.Begin(ctx)
	if err != nil {
		return nil, err
	}
	res, err := tx.JobGetAvailable(ctx, params)
	settleCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fetchSettleTimeout)
	defer cancel()
	if err != nil {
		// On a connection that the fetch's timeout closed this fails
		// at once; the server rolls back when it sees it gone.
		_ = tx.Rollback(settleCtx)
		return nil, err
	}
	if err := tx.Commit(settleCtx); err != nil {
		return e.afterCommitFailed(settleCtx, params, res, err)
	}
	return res, nil
}

// afterCommitFailed decides what a fetch whose COMMIT failed holds: the
// commit may have taken effect with its reply lost. The jobs the database
// shows running at the attempt this fetch gave them, by this client, are
// this fetch's to work; a job that is not was rolled back (or taken since
// by a later fetch, after a rollback) and is not returned.
func (e *fetchExecutor) afterCommitFailed(ctx context.Context, params *riverdriver.JobGetAvailableParams, res *riverdriver.JobGetAvailableResult, commitErr error) (*riverdriver.JobGetAvailableResult, error) {
	if res == nil || len(res.Jobs) == 0 {
		return nil, commitErr
	}
	ids := make([]int64, len(res.Jobs))
	for i, j := range res.Jobs {
		ids[i] = j.ID
	}
	now, err := e.JobGetByIDMany(ctx, &riverdriver.JobGetByIDManyParams{ID: ids, Schema: params.Schema})
	if err != nil {
		e.logger.Error("riverbus: a fetch's commit failed and its jobs could not be looked at: any it took stay running until River rescues them (RescueStuckJobsAfter)",
			slog.String("queue", params.Queue), slog.Int("jobs", len(ids)), slog.String("commit_error", commitErr.Error()), slog.String("error", err.Error()))
		return nil, commitErr
	}
	held := &riverdriver.JobGetAvailableResult{}
	for _, j := range res.Jobs {
		i := slices.IndexFunc(now, func(n *rivertype.JobRow) bool { return n.ID == j.ID })
		if i < 0 || !sameAttempt(now[i], j, params.ClientID) {
			continue
		}
		held.Jobs = append(held.Jobs, j)
		if err, ok := res.DecodeErrors[j.ID]; ok {
			if held.DecodeErrors == nil {
				held.DecodeErrors = map[int64]error{}
			}
			held.DecodeErrors[j.ID] = err
		}
	}
	if len(held.Jobs) == 0 {
		return nil, commitErr
	}
	e.logger.Warn("riverbus: a fetch's commit reply was lost; the database shows the fetch's jobs taken, so they are worked",
		slog.String("queue", params.Queue), slog.Int("jobs", len(held.Jobs)), slog.String("commit_error", commitErr.Error()))
	return held, nil
}

// sameAttempt says whether now, a job as the database holds it, is still
// in the attempt fetched began: running, at the same attempt number and
// start, last attempted by client.
func sameAttempt(now, fetched *rivertype.JobRow, client string) bool {
	return now.State == rivertype.JobStateRunning && now.Attempt == fetched.Attempt &&
		now.AttemptedAt != nil && fetched.AttemptedAt != nil && now.AttemptedAt.Equal(*fetched.AttemptedAt) &&
		len(now.AttemptedBy) > 0 && now.AttemptedBy[len(now.AttemptedBy)-1] == client
}
