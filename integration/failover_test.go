package integration_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/pgserver"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/internal/testwait"
)

// cluster is a migrated primary with an asynchronous streaming standby, and
// the multi-host URL an operator gives riverbus so that it follows a
// promotion (target_session_attrs=read-write).
type cluster struct {
	primary, standby *pgserver.Server
	url              string // both servers, the writable one chosen
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	primary, primaryURL := pgtest.NewServer(t)
	standby, err := primary.StartStandby(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = standby.Stop() })
	p, s := fmt.Sprintf("127.0.0.1:%d", primary.Port()), fmt.Sprintf("127.0.0.1:%d", standby.Port())
	require.Contains(t, primaryURL, p)
	return &cluster{
		primary: primary,
		standby: standby,
		url:     strings.Replace(primaryURL, p, p+","+s, 1) + "&target_session_attrs=read-write",
	}
}

// run creates the pool and starts a fan-out and a print-mode testworker
// for it, both through the multi-host URL; it returns a pool of
// connections through that URL too, and the worker.
func (c *cluster) run(t *testing.T, params bustype.PoolParams, workerArgs ...string) (*pgxpool.Pool, *proc) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a primary and a standby")
	}
	db := pgtest.Connect(t, c.url)
	_, _, err := pools.Create(context.Background(), db, params)
	require.NoError(t, err)
	env := []string{"RIVERBUS_POLL_INTERVAL=200ms", "RIVERBUS_LOG_LEVEL=warn"}
	start(t, c.url, "riverbus", env, "fanout")
	worker := start(t, c.url, "testworker", nil, append([]string{"-pool", params.Name, "-mode", "print", "-id", "w"}, workerArgs...)...)
	worker.waitOutput("ready", 30*time.Second)
	return db, worker
}

// failover cuts replication (what the primary commits from now on never
// reaches the standby) and returns a func that kills the primary with
// SIGKILL and promotes the standby.
func (c *cluster) cut(t *testing.T) (failover func()) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, c.standby.CaughtUp(ctx, c.primary))
	require.NoError(t, c.standby.CutReplication(ctx))
	return func() {
		c.primary.Kill()
		require.NoError(t, c.standby.Promote(ctx))
		t.Log("primary killed, standby promoted")
	}
}

// appendEvents appends n events of key keyOf(i), one transaction each, and
// returns their ids with the sequences they got.
func appendEvents(t *testing.T, db *pgxpool.Pool, n int, keyOf func(i int) string) map[uuid.UUID]int64 {
	t.Helper()
	out := map[uuid.UUID]int64{}
	for i := range n {
		id := uuid.New()
		var seq int64
		require.NoError(t, retryFor(20*time.Second, func() error {
			return db.QueryRow(context.Background(), `INSERT INTO riverbus_event (event_id, type, key, data)
				VALUES ($1, 'it.failover', $2, '{}') RETURNING global_sequence`, id, keyOf(i)).Scan(&seq)
		}))
		out[id] = seq
	}
	return out
}

// delivery is one attempt a print-mode testworker reported.
type delivery struct {
	seq, job int64
	event    string
	key      string
	attempt  int
}

var deliveryLine = regexp.MustCompile(`(?m)^delivered seq=(\d+) job=(\d+) event=(\S+) key=(\S*) attempt=(\d+)$`)

func deliveries(p *proc) []delivery {
	var out []delivery
	for _, m := range deliveryLine.FindAllStringSubmatch(p.out.String(), -1) {
		seq, _ := strconv.ParseInt(m[1], 10, 64)
		job, _ := strconv.ParseInt(m[2], 10, 64)
		attempt, _ := strconv.Atoi(m[5])
		out = append(out, delivery{seq: seq, job: job, event: m[3], key: m[4], attempt: attempt})
	}
	return out
}

// deliveredEvents returns how many distinct jobs delivered each event.
func deliveredEvents(p *proc) map[string]map[int64]bool {
	out := map[string]map[int64]bool{}
	for _, d := range deliveries(p) {
		if out[d.event] == nil {
			out[d.event] = map[int64]bool{}
		}
		out[d.event][d.job] = true
	}
	return out
}

// The primary hands out and delivers numbers the standby never hears of
// (replication cut), dies, and the standby is promoted: no global_sequence
// and no River job id that a handler saw before is given to another event
// afterwards, and every event committed on the new primary is delivered
// once. Events appended on the new primary before riverbus reconnects
// took numbers from the standby's sequence, which is behind: they too must
// reach handlers under numbers never used before.
func TestFailoverNeverReusesDeliveredNumbers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newCluster(t)
	db, worker := c.run(t, bustype.PoolParams{Name: "failover"})
	noKey := func(int) string { return "" }

	before := appendEvents(t, db, 20, noKey)
	testwait.Eventually(t, 30*time.Second, func() bool { return len(deliveredEvents(worker)) >= len(before) }, "the first events delivered")
	failover := c.cut(t)
	lost := appendEvents(t, db, 100, noKey)
	testwait.Eventually(t, 30*time.Second, func() bool { return len(deliveredEvents(worker)) >= len(before)+len(lost) },
		"the events the standby never receives delivered by the old primary")
	failover()

	after := appendEvents(t, db, 100, noKey)
	testwait.Eventually(t, 60*time.Second, func() bool {
		got := deliveredEvents(worker)
		for id := range after {
			if len(got[id.String()]) == 0 {
				return false
			}
		}
		return true
	}, "every event appended on the new primary delivered")

	// What the old primary committed after the cut is PostgreSQL's loss.
	var survived int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM riverbus_event WHERE event_id = ANY($1)`, keys(lost)).Scan(&survived))
	require.Zero(t, survived, "the test cut replication before the lost events")

	eventOfSeq := map[int64]string{}
	deliveryOfJob := map[int64]delivery{}
	for _, d := range deliveries(worker) {
		if prev, ok := eventOfSeq[d.seq]; ok {
			require.Equal(t, prev, d.event, "global_sequence %d was delivered for two events", d.seq)
		}
		eventOfSeq[d.seq] = d.event
		if prev, ok := deliveryOfJob[d.job]; ok {
			require.Equal(t, prev.event, d.event, "River job id %d was delivered for two events (sequences %d and %d)", d.job, prev.seq, d.seq)
		}
		deliveryOfJob[d.job] = d
	}
	got := deliveredEvents(worker)
	for id := range after {
		require.Len(t, got[id.String()], 1, "event %s appended on the new primary is delivered by one job", id)
	}
}

func keys[K comparable, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

const lanes, perLane = 4, 4

// An ordered (key) pool has jobs running when the primary dies; their
// completions, and the lanes' next jobs, happened on the old primary only.
// On the promoted standby those jobs are still `running` and hold their
// lanes: every lane must move on within seconds of the new primary being
// reachable, not after River's rescue interval (an hour here).
func TestFailoverOrderedPoolResumesWithinSeconds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newCluster(t)
	db, worker := c.run(t, bustype.PoolParams{Name: "lanes", Ordering: bustype.OrderingKey},
		"-max-delay", "3s", "-slow-through", strconv.Itoa(lanes), "-rescue-after", "1h")

	events := appendEvents(t, db, lanes*perLane, func(i int) string { return fmt.Sprintf("k%d", i%lanes) })
	// Every lane's first job runs (for 3 s); the standby sees them start,
	// then hears no more.
	testwait.Eventually(t, 30*time.Second, func() bool { return len(deliveries(worker)) >= lanes }, "every lane's first job running")
	failover := c.cut(t)
	// The old primary completes those jobs and starts the lanes' next ones:
	// all of it lost. On the standby the first jobs stay running, holding
	// their lanes.
	testwait.Eventually(t, 30*time.Second, func() bool { return len(deliveries(worker)) >= 2*lanes }, "the lanes' second jobs running on the old primary")
	failover()
	promoted := time.Now()

	testwait.Eventually(t, 60*time.Second, func() bool {
		var done int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'lanes' AND state = 'completed'`).Scan(&done); err != nil {
			return false // a connection to the dead primary
		}
		return done == len(events)
	}, "every event's job completed on the new primary")
	took := time.Since(promoted)
	t.Logf("every lane finished %s after the promotion", took.Round(time.Millisecond))
	// The first job of each lane again (3 s), the others at once, plus
	// the reconnection: seconds, where River's rescuer would take an hour.
	require.Less(t, took, 15*time.Second)

	var rescued int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'lanes'
		AND EXISTS (SELECT FROM unnest(errors) e WHERE e->>'error' LIKE '%failed over%')`).Scan(&rescued))
	require.Positive(t, rescued, "the jobs running at the failover were made retryable with an error that says why")
}
