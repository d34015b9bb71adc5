// Package wmbench measures riverbus's Watermill Pub/Sub
// (github.com/riverbus/riverbus/watermill) beside watermill-sql v4, the
// PostgreSQL Pub/Sub it replaces, on the same server in the same run. The
// riverbus-watermill-bench command (Main; `make bench` builds and runs it
// after the core bench) calls Run.
//
// # Scenarios
//
//   - publish-consume: 20k messages (at scale 1) published from 8
//     goroutines, one message per Publish call, nothing consuming; then the
//     same messages consumed as a backlog by two consumer groups that
//     existed before the publish, one with 1 subscriber process, the other
//     with 4. Each process acks every message; the time is from the first
//     Subscribe call to the last ack. riverbus's fan-out runs in the bench
//     process and has turned the backlog into jobs before the subscribers
//     start.
//   - latency-200, latency-1000: messages offered at 200 and 1,000 a
//     second for 20 s, open loop, from 32 goroutines; the publish time
//     travels in a metadata entry and the handler records now − that
//     (p50, p99), with the rate the publishers reached and the rate the
//     handler kept up with. The subscriber runs in the bench process
//     (riverbus's with RunFanout: the fan-out too), after 5,000 warm-up
//     messages and ANALYZE.
//   - catch-up: 100k messages published (100 per call) while nothing
//     consumes and no fan-out runs, then one subscriber process from its
//     Subscribe call to its last ack; riverbus's runs the fan-out
//     (RunFanout), so its time includes turning the backlog into jobs.
//
// Every measured phase also reports what each message cost the database on
// each side, from pg_stat_statements (the throwaway server loads it): the
// statement time and the statements per message, and the statements that
// took the most time (Report.TopStatements).
//
// # Method
//
// Each side of each measurement gets a fresh database: riverbus's from a
// template migrated with migrations.Up, watermill-sql's empty, its tables
// created by its subscriber (InitializeSchema). Both sides run over pgx
// v5 pgxpool pools with their defaults, except that watermill-sql polls
// every 100 ms (its default is 1 s), riverbus's worker's poll interval,
// and both use a consumer group. The sides alternate which goes first from
// run to run, and the database is analyzed and checkpointed before each
// timed phase. Subscriber processes are this program re-executed with the
// hidden subcommand SubscriberCommand.
package wmbench
