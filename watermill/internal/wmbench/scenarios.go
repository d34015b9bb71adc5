package wmbench

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverbus/riverbus/internal/benchkit"
)

// Sizes at scale 1, and what the scenarios use.
const (
	// publishMessages are published by publishers goroutines, one message
	// per Publish call (one transaction each, on both sides).
	publishMessages = 20_000
	publishers      = 8
	// publishConns is the publishing pool's size: a connection for each
	// publisher, and riverbus's wake-up after each append's commit (sent
	// from another connection of the pool, see outbox.Append).
	publishConns = 2 * publishers

	// catchUpMessages are published while no subscriber runs, 100 per
	// Publish call, then consumed by one subscriber process.
	catchUpMessages = 100_000
	catchUpPerCall  = 100

	// latencyDuration is how long messages are published at the offered
	// rate, from latencyPublishers goroutines; the handlers then have up
	// to latencyDrainTimeout, or five times the duration if longer, to
	// receive the last ones.
	latencyDuration     = 20 * time.Second
	latencyPublishers   = 32
	latencyDrainTimeout = 30 * time.Second
	// latencyWarmUp messages are published and consumed before the clock
	// starts, then the database is analyzed: both sides' tables then hold
	// a history, as a deployment's do (River keeps completed jobs a day,
	// watermill-sql keeps every message), and the planner has statistics.
	latencyWarmUp = 5_000
)

// consumerGroups of the publish-consume scenario: the same backlog is
// consumed by one process for group1 and by four for group4.
const (
	group1   = "one-process"
	group4   = "four-processes"
	groupLat = "latency"
	groupCU  = "catch-up"
)

var publishConsumeMetrics = []metric{
	{"publish_rate", fmt.Sprintf("publish, %d publishers, 1 message a call", publishers), "msg/s", "higher"},
	{"publish_db_ms", "publish: database time per message", "ms", "lower"},
	{"publish_statements", "publish: statements per message", "", "lower"},
	{"consume1_rate", "consume the backlog, 1 subscriber process", "msg/s", "higher"},
	{"consume1_db_ms", "consume, 1 process: database time per message", "ms", "lower"},
	{"consume1_statements", "consume, 1 process: statements per message", "", "lower"},
	{"consume4_rate", "consume the backlog, 4 subscriber processes", "msg/s", "higher"},
	{"consume4_statements", "consume, 4 processes: statements per message", "", "lower"},
}

// measurePublishConsume: publish throughput, then the published messages
// consumed as a backlog by one subscriber process (group1) and then by four
// (group4). riverbus's fan-out runs in this process, started after the
// publish phase: the backlog is all jobs before the subscribers start, and
// it stays running while they consume.
func measurePublishConsume(ctx context.Context, e *env, side impl) (sample, string, error) {
	n := e.Scaled(publishMessages, benchkit.Least(e.Opts, 100, 20))
	note := fmt.Sprintf("%d messages published from %d goroutines, 1 per Publish call, nothing consuming; then consumed as a backlog by consumer groups that existed before the publish: one by 1 subscriber process, another by 4 (child processes; each acks every message; time from the first Subscribe call to the last ack); riverbus's fan-out runs in the bench process and has made every job before the subscribers start (catch-up includes the fan-out)", n, publishers)
	p, err := prepare(ctx, e, side, publishConns, group1, group4)
	if err != nil {
		return nil, "", err
	}
	defer p.close()
	d, db, pub := p.d, p.db, p.pub
	if err := d.Settle(ctx, db); err != nil {
		return nil, "", err
	}

	s := sample{}
	if err := d.resetStatements(ctx); err != nil {
		return nil, "", err
	}
	took, err := publishAll(ctx, pub, n, publishers, 1)
	if err != nil {
		return nil, "", fmt.Errorf("publish: %w", err)
	}
	s["publish_rate"] = float64(n) / took.Seconds()
	if err := d.addStatements(ctx, s, "publish_", n); err != nil {
		return nil, "", err
	}

	if side == implRiverbus {
		fan, err := startFanout(ctx, db, e.Quiet)
		if err != nil {
			return nil, "", err
		}
		defer func() { _ = fan.Stop(context.WithoutCancel(ctx)) }()
		t0 := time.Now()
		if err := waitFannedOut(ctx, db, fan); err != nil {
			return nil, "", err
		}
		e.Log.Info("wmbench: backlog fanned out", "messages", n, "groups", 2, "took", time.Since(t0).Round(time.Millisecond))
	}
	for _, c := range []struct {
		group string
		procs int
		key   string
	}{{group1, 1, "consume1_"}, {group4, 4, "consume4_"}} {
		if err := d.Settle(ctx, db); err != nil {
			return nil, "", err
		}
		if err := d.resetStatements(ctx); err != nil {
			return nil, "", err
		}
		took, dups, err := consumeWithChildren(ctx, side, d.URL, c.group, c.procs, n, false)
		if err != nil {
			return nil, "", fmt.Errorf("consume with %d process(es): %w", c.procs, err)
		}
		if dups > 0 {
			e.Log.Warn("wmbench: duplicate deliveries", "side", side, "processes", c.procs, "duplicates", dups)
		}
		s[c.key+"rate"] = float64(n) / took.Seconds()
		if err := d.addStatements(ctx, s, c.key, n); err != nil {
			return nil, "", err
		}
	}
	return s, note, nil
}

var catchUpMetrics = []metric{
	{"catchup_seconds", "time to ack the whole backlog, 1 subscriber process", "s", "lower"},
	{"catchup_rate", "the same as a rate", "msg/s", "higher"},
	{"catchup_db_ms", "catch-up: database time per message", "ms", "lower"},
	{"catchup_statements", "catch-up: statements per message", "", "lower"},
	{"backlog_publish_rate", fmt.Sprintf("backlog publish, %d publishers, %d messages a call", publishers, catchUpPerCall), "msg/s", "higher"},
}

// measureCatchUp: a backlog published while no subscriber (and, for
// riverbus, no fan-out) runs, then one subscriber process from the start
// of its consumer group to the last ack. riverbus's subscriber process
// runs the fan-out (RunFanout), so its time includes turning the backlog
// into jobs.
func measureCatchUp(ctx context.Context, e *env, side impl) (sample, string, error) {
	n := e.Scaled(catchUpMessages, benchkit.Least(e.Opts, 500, 100))
	note := fmt.Sprintf("%d messages published (%d per Publish call from %d goroutines) while no subscriber and no fan-out runs; then 1 subscriber process (riverbus: with RunFanout, so the time includes the fan-out turning the backlog into jobs) from its Subscribe call to its last ack", n, catchUpPerCall, publishers)
	p, err := prepare(ctx, e, side, publishConns, groupCU)
	if err != nil {
		return nil, "", err
	}
	defer p.close()
	d, db, pub := p.d, p.db, p.pub
	s := sample{}
	took, err := publishAll(ctx, pub, n, publishers, catchUpPerCall)
	if err != nil {
		return nil, "", fmt.Errorf("publish the backlog: %w", err)
	}
	s["backlog_publish_rate"] = float64(n) / took.Seconds()
	if err := d.Settle(ctx, db); err != nil {
		return nil, "", err
	}
	if err := d.resetStatements(ctx); err != nil {
		return nil, "", err
	}
	took, dups, err := consumeWithChildren(ctx, side, d.URL, groupCU, 1, n, side == implRiverbus)
	if err != nil {
		return nil, "", fmt.Errorf("catch up: %w", err)
	}
	if dups > 0 {
		e.Log.Warn("wmbench: duplicate deliveries", "side", side, "duplicates", dups)
	}
	s["catchup_seconds"] = took.Seconds()
	s["catchup_rate"] = float64(n) / took.Seconds()
	if err := d.addStatements(ctx, s, "catchup_", n); err != nil {
		return nil, "", err
	}
	return s, note, nil
}

// prepared is a fresh database of one side with a pool and a publisher
// over it.
type prepared struct {
	d   *database
	db  *pgxpool.Pool
	pub message.Publisher
}

// prepare creates a fresh database for side, connects a pool of conns
// connections, initializes the topic for groups (see initialize) and makes
// a publisher.
func prepare(ctx context.Context, e *env, side impl, conns int32, groups ...string) (_ *prepared, err error) {
	p := &prepared{}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	if p.d, err = e.newDatabase(ctx, side); err != nil {
		return nil, err
	}
	if p.db, err = p.d.Connect(ctx, conns); err != nil {
		return nil, err
	}
	if err := initialize(side, p.db, e.Quiet, groups...); err != nil {
		return nil, err
	}
	if p.pub, err = newPublisher(side, p.db); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *prepared) close() {
	if p.pub != nil {
		_ = p.pub.Close()
	}
	if p.db != nil {
		p.db.Close()
	}
	if p.d != nil {
		p.d.drop()
	}
}
