package deadletters

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/outbox"
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
// undeliverable units their real envelope again, read from riverbus_event,
// in riverbus_dead_letter and in river_job. It returns, by job id, the ones
// whose envelope still cannot be encoded, with the reason; those are left
// as they are.
func rebuildUndeliverable(ctx context.Context, tx pgx.Tx, ids []int64) (map[int64]string, error) {
	rows, err := tx.Query(ctx, sqlDeadLetterStubs, ids)
	if err != nil {
		return nil, fmt.Errorf("read undeliverable dead letters: %w", err)
	}
	stubs := map[int64]undeliverableStub{}
	var id int64
	var raw []byte
	if _, err := pgx.ForEachRow(rows, []any{&id, &raw}, func() error {
		var s undeliverableStub
		if err := json.Unmarshal(raw, &s); err != nil {
			return fmt.Errorf("dead letter %d: %w", id, err)
		}
		stubs[id] = s
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read undeliverable dead letters: %w", err)
	}
	stay := map[int64]string{}
	for id, s := range stubs {
		args, reason, err := rebuildEnvelope(ctx, tx, s)
		if err != nil {
			return nil, fmt.Errorf("rebuild envelope of dead letter %d: %w", id, err)
		}
		if reason != "" {
			stay[id] = reason
			continue
		}
		if _, err := tx.Exec(ctx, sqlDeadLetterSetArgs, id, args); err != nil {
			return nil, fmt.Errorf("rebuild envelope of dead letter %d: %w", id, err)
		}
	}
	return stay, nil
}

// rebuildEnvelope builds the envelope the fan-out would have built for the
// stub's event (Args) or group (GroupArgs), keeping what the stub says
// besides the payload (late, a group's part). reason says why it cannot,
// when it cannot.
func rebuildEnvelope(ctx context.Context, tx pgx.Tx, s undeliverableStub) ([]byte, string, error) {
	var seqs []int64
	if s.group != nil {
		seqs = s.group.Sequences
	} else {
		seqs = []int64{s.event.GlobalSequence}
	}
	rows, err := tx.Query(ctx, sqlEventsBySequence, seqs)
	if err != nil {
		return nil, "", err
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (outbox.Event, error) {
		var e outbox.Event
		var id uuid.UUID
		var data, metadata []byte
		err := row.Scan(&e.GlobalSequence, &id, &e.Type, &e.Key, &e.Tags, &data, &metadata, &e.OccurredAt)
		e.EventID, e.Data, e.Metadata = id, data, metadata
		return e, err
	})
	if err != nil {
		return nil, "", err
	}
	if len(events) != len(seqs) {
		return nil, fmt.Sprintf("%d of the %d events it names are no longer in riverbus_event", len(seqs)-len(events), len(seqs)), nil
	}
	var env any
	if g := s.group; g != nil {
		env = bustype.GroupJob{GlobalSequence: g.GlobalSequence, TransactionID: g.TransactionID, Key: g.Key,
			Events: events, Late: g.Late, Part: g.Part, Parts: g.Parts}
	} else {
		env = bustype.EventJob{Event: events[0], Late: s.event.Late}
	}
	args, err := json.Marshal(env)
	if err != nil {
		return nil, "still cannot be encoded as JSON: " + err.Error(), nil
	}
	return args, "", nil
}
