package horizon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riverbus/riverbus/internal/database"
)

// Failover is what one fence did (a row of riverbus_failover, migration
// 020; docs/design.md §2.8): the database went over to a new WAL timeline (a
// promoted standby, a point-in-time recovery) or another cluster, and
// riverbus made sure no number delivered on the old one is given to
// another event.
type Failover struct {
	ID       int64
	FencedAt time.Time
	// OldTimeline and NewTimeline are the WAL timelines the horizon was
	// recorded on and is on now; the system identifiers the clusters'.
	OldTimeline, NewTimeline                 int64
	OldSystemIdentifier, NewSystemIdentifier int64
	// HorizonBefore is the horizon that came through replication;
	// (HorizonBefore, HorizonAfter] is the range the fence passed as one
	// proven gap: it holds every number the old timeline handed out after
	// what this server received.
	HorizonBefore, HorizonAfter int64
	// SequenceBefore is the sequence's last value on this server when the
	// fence ran.
	SequenceBefore int64
	// EventsRenumbered counts the events above HorizonBefore that got new
	// numbers above HorizonAfter: appended on this server before the
	// fence, or replicated but not yet passed by the horizon.
	EventsRenumbered int64
	// JobIDBefore and JobIDAfter: River's job id sequence was moved from
	// the one to the other.
	JobIDBefore, JobIDAfter int64
	// JobsRescued counts the riverbus pools' jobs that were running on the
	// old timeline and were made retryable at once (or discarded or
	// cancelled, as River's rescuer would).
	JobsRescued int64
}

// Skipped is how many numbers the fence passed as one proven gap.
func (f *Failover) Skipped() int64 { return f.HorizonAfter - f.HorizonBefore }

func scanFailover(row pgx.Row) (*Failover, error) {
	var f Failover
	var oldSystem *int64
	err := row.Scan(&f.ID, &f.FencedAt, &f.OldTimeline, &f.NewTimeline, &oldSystem, &f.NewSystemIdentifier,
		&f.HorizonBefore, &f.HorizonAfter, &f.SequenceBefore, &f.EventsRenumbered, &f.JobIDBefore, &f.JobIDAfter, &f.JobsRescued)
	if err != nil {
		return nil, err
	}
	if oldSystem != nil {
		f.OldSystemIdentifier = *oldSystem
	}
	return &f, nil
}

// Fence runs riverbus_failover_fence: when the server is not the one the
// horizon was recorded on (another WAL timeline or system identifier), it
// moves the event sequence and River's job id sequence 2^32 past their
// values, renumbers the events above the replicated horizon above that,
// passes the emptied range as one proven gap, retries at once the pools'
// jobs that were running on the old timeline, and records the new
// timeline. It returns nil when there was nothing to fence (the same
// server, or a standby). Until a fence has run on a new timeline, the
// database refuses writes of river_job and of the horizon (the trigger
// riverbus_timeline_guard). It waits at most 10 s for the round's lock and
// for appenders in flight.
func Fence(ctx context.Context, db database.DB) (*Failover, error) {
	f, err := scanFailover(db.QueryRow(ctx, sqlFailoverFence))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("fence the old timeline after a failover: %w", err)
	}
	return f, nil
}

// LastFailover returns the latest fence, or nil when there was none.
func LastFailover(ctx context.Context, db database.DB) (*Failover, error) {
	f, err := scanFailover(db.QueryRow(ctx, sqlLastFailover))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the last failover: %w", err)
	}
	return f, nil
}
