package deadletters

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/riverbus/riverbus/bustype"
)

// undeliverableStub is the args of a dead letter the fan-out made of a unit
// it could not turn into a job: a bustype.GroupJobStub when it names
// sequences, a bustype.EventJobStub otherwise.
type undeliverableStub struct {
	event *bustype.EventJobStub
	group *bustype.GroupJobStub
}

func (s *undeliverableStub) UnmarshalJSON(b []byte) error {
	var probe struct {
		Sequences json.RawMessage `json:"sequences"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return err
	}
	if probe.Sequences != nil {
		s.group = &bustype.GroupJobStub{}
		return json.Unmarshal(b, s.group)
	}
	s.event = &bustype.EventJobStub{}
	return json.Unmarshal(b, s.event)
}

// rebuildUndeliverable gives the dead letters among ids that are stubs of
// undeliverable units their real envelope again, built by the database
// from riverbus_event (sqlDeadLetterRebuild: an event's payload, however
// big, never comes to this process), in riverbus_dead_letter and in
// river_job. It returns, by job id, the ones whose envelope still cannot
// be delivered, with the reason; those are left as they are.
func rebuildUndeliverable(ctx context.Context, tx pgx.Tx, ids []int64) (map[int64]string, error) {
	rows, err := tx.Query(ctx, sqlDeadLetterStubs, ids)
	if err != nil {
		return nil, fmt.Errorf("read undeliverable dead letters: %w", err)
	}
	stubs := map[int64][]byte{}
	var id int64
	var raw []byte
	if _, err := pgx.ForEachRow(rows, []any{&id, &raw}, func() error {
		stubs[id] = slices.Clone(raw)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read undeliverable dead letters: %w", err)
	}
	stay := map[int64]string{}
	for id, raw := range stubs {
		reason, err := rebuildEnvelope(ctx, tx, id, raw)
		if err != nil {
			return nil, fmt.Errorf("rebuild envelope of dead letter %d: %w", id, err)
		}
		if reason != "" {
			stay[id] = reason
		}
	}
	return stay, nil
}

// rebuildEnvelope rebuilds dead letter id's envelope from its stub (raw)
// when it can, or says why it cannot.
func rebuildEnvelope(ctx context.Context, tx pgx.Tx, id int64, raw []byte) (string, error) {
	var s undeliverableStub
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", err
	}
	var seqs []int64
	if s.group != nil {
		seqs = s.group.Sequences
	} else {
		seqs = []int64{s.event.GlobalSequence}
	}
	var n int
	if err := tx.QueryRow(ctx, sqlEventsCount, seqs).Scan(&n); err != nil {
		return "", err
	}
	if n != len(seqs) {
		return fmt.Sprintf("%d of the %d events it names are no longer in riverbus_event", len(seqs)-n, len(seqs)), nil
	}
	// In a savepoint: a value too deep for the server's stack to walk, or
	// too big for jsonb, fails the statement.
	sp, err := tx.Begin(ctx)
	if err != nil {
		return "", err
	}
	var deep bool
	err = sp.QueryRow(ctx, sqlDeadLetterRebuild, id, raw, seqs).Scan(&deep)
	if err == nil {
		err = sp.Commit(ctx)
	} else if rerr := sp.Rollback(ctx); rerr != nil {
		return "", rerr
	}
	const tooDeep = "still cannot be encoded as JSON: exceeded max depth (nested over the 10000 levels a handler's decoder accepts)"
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == pgerrcode.StatementTooComplex:
		return tooDeep + ": " + pgErr.Message, nil
	case errors.As(err, &pgErr) && (pgerrcode.IsDataException(pgErr.Code) || pgerrcode.IsProgramLimitExceeded(pgErr.Code)):
		return "still cannot be encoded as JSON: " + pgErr.Message, nil
	case err != nil:
		return "", err
	case deep:
		return tooDeep, nil
	}
	return "", nil
}
