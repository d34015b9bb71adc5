package cli_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/outbox"
)

// `riverbus status` names what holds a pool's checkpoint: a retrying job
// (the demo's billing pool, whose lag grew with an empty LAST ERROR), and
// in an ordered pool that blocks on dead letters, the dead letter its lane
// waits for.
func TestStatusNamesCheckpointHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	db := pgtest.Connect(t, dbURL)
	ok(t, run(t, dbURL, "pool", "create", "billing", "--max-attempts", "5"))
	ok(t, run(t, dbURL, "pool", "create", "ledger", "--ordering", "key", "--on-dead-letter", "block", "--max-attempts", "2"))
	for range 3 {
		_, err := outbox.Append(ctx, db, outbox.Event{Type: "invoice.created", Key: "customer-1", Data: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}
	f, err := fanout.New(db, &fanout.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	_, err = f.Pass(ctx)
	require.NoError(t, err)

	// billing's first job fails twice and waits a minute for its third
	// attempt; the others complete.
	_, err = db.Exec(ctx, `UPDATE river_job SET state = 'retryable', attempt = 2, attempted_at = now(),
		scheduled_at = now() + interval '1 minute',
		errors = ARRAY['{"attempt": 1, "error": "first"}'::jsonb, '{"attempt": 2, "error": "decode invoice:\u001b[2J cents is a string"}'::jsonb]
		WHERE kind = 'billing' AND args->>'global_sequence' = '1'`)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE kind = 'billing' AND args->>'global_sequence' <> '1'`)
	require.NoError(t, err)
	// ledger's first job is a dead letter that keeps customer-1's lane.
	_, err = db.Exec(ctx, `UPDATE river_job SET state = 'discarded', attempt = 2, finalized_at = now(),
		errors = ARRAY['{"attempt": 2, "error": "ledger rejected the entry"}'::jsonb]
		WHERE kind = 'ledger' AND args->>'global_sequence' = '1'`)
	require.NoError(t, err)
	var billingJob, ledgerDead, ledgerNext int64
	require.NoError(t, db.QueryRow(ctx, `SELECT
		(SELECT id FROM river_job WHERE kind = 'billing' AND args->>'global_sequence' = '1'),
		(SELECT id FROM river_job WHERE kind = 'ledger' AND args->>'global_sequence' = '1'),
		(SELECT id FROM river_job WHERE kind = 'ledger' AND args->>'global_sequence' = '2')`).Scan(&billingJob, &ledgerDead, &ledgerNext))

	r := ok(t, run(t, dbURL, "status", "--json"))
	var st struct {
		Pools []struct {
			Name      string `json:"name"`
			LastError string `json:"last_error"`
			Holder    *struct {
				JobID         int64      `json:"job_id"`
				Sequence      int64      `json:"global_sequence"`
				State         string     `json:"state"`
				Attempt       int        `json:"attempt"`
				MaxAttempts   int        `json:"max_attempts"`
				NextAttemptAt *time.Time `json:"next_attempt_at"`
				LastError     string     `json:"last_error"`
				Lane          *string    `json:"lane"`
				Stuck         bool       `json:"stuck"`
				HeldSince     time.Time  `json:"held_since"`
				LaneBlockedBy *struct {
					JobID       int64      `json:"job_id"`
					Sequence    int64      `json:"global_sequence"`
					DeadLetter  bool       `json:"dead_letter"`
					Attempt     int        `json:"attempt"`
					MaxAttempts int        `json:"max_attempts"`
					DiscardedAt *time.Time `json:"discarded_at"`
					LastError   string     `json:"last_error"`
				} `json:"lane_blocked_by"`
			} `json:"checkpoint_holder"`
		} `json:"pools"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st), r.stdout)
	require.Len(t, st.Pools, 2)
	billing, ledger := st.Pools[0], st.Pools[1]

	require.NotNil(t, billing.Holder, r.stdout)
	h := billing.Holder
	require.Equal(t, billingJob, h.JobID)
	require.Equal(t, int64(1), h.Sequence)
	require.Equal(t, "retryable", h.State)
	require.Equal(t, 2, h.Attempt)
	require.Equal(t, 5, h.MaxAttempts)
	require.NotNil(t, h.NextAttemptAt)
	require.WithinDuration(t, time.Now().Add(time.Minute), *h.NextAttemptAt, 30*time.Second)
	require.Equal(t, "decode invoice:\x1b[2J cents is a string", h.LastError)
	require.Equal(t, h.LastError, billing.LastError, "LAST ERROR is the holder's")
	require.True(t, h.Stuck)
	require.Nil(t, h.Lane)

	require.NotNil(t, ledger.Holder, r.stdout)
	h = ledger.Holder
	require.Equal(t, ledgerNext, h.JobID)
	require.Equal(t, "pending", h.State)
	require.Equal(t, "customer-1", *h.Lane)
	require.True(t, h.Stuck)
	require.NotNil(t, h.LaneBlockedBy)
	b := h.LaneBlockedBy
	require.Equal(t, ledgerDead, b.JobID)
	require.Equal(t, int64(1), b.Sequence)
	require.True(t, b.DeadLetter)
	require.Equal(t, 2, b.Attempt)
	require.Equal(t, 2, b.MaxAttempts)
	require.NotNil(t, b.DiscardedAt)
	require.Equal(t, "ledger rejected the entry", b.LastError)
	require.Equal(t, "ledger rejected the entry", ledger.LastError)

	// The JSON reads back into a riverbus.Status (checkpoint.Holder's
	// UnmarshalJSON), which writes it again unchanged.
	var full riverbus.Status
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &full))
	again, err := json.Marshal(&full)
	require.NoError(t, err)
	require.JSONEq(t, r.stdout, string(again))
	require.True(t, full.Pool("billing").Holder.Stuck())
	require.Equal(t, ledgerDead, full.Pool("ledger").Holder.Blocker().ID)

	r = ok(t, run(t, dbURL, "status"))
	require.Regexp(t, `billing: checkpoint 0 held for \S+ by job `+itoa(billingJob)+
		` \(event 1, retryable, attempt 2/5, next attempt \d\d:\d\d:\d\d \(in [0-9ms]+\), last error "decode invoice:\\x1b\[2J cents is a string"\); after attempt 5 it becomes a dead letter`, r.stdout)
	require.Regexp(t, `ledger: checkpoint 0 held for \S+ by job `+itoa(ledgerNext)+` \(event 2, pending in lane "customer-1", attempt 0/2\), `+
		`whose lane waits for dead letter `+itoa(ledgerDead)+` \(event 1, dead letter in lane "customer-1", attempt 2/2, discarded \d\d:\d\d:\d\d, last error "ledger rejected the entry"\): `+
		"`riverbus dlq retry "+itoa(ledgerDead)+"` or `riverbus dlq purge "+itoa(ledgerDead)+"` frees it", r.stdout)
	require.NotContains(t, r.stdout, "\x1b", "terminal escapes are escaped")

	ok(t, run(t, dbURL, "pool", "pause", "billing"))
	r = ok(t, run(t, dbURL, "status"))
	require.Contains(t, r.stdout, "after attempt 5 it becomes a dead letter; the pool is paused (riverbus pool resume billing)")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
