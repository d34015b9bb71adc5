// Package bench measures riverbus side by side with raw River on the same
// PostgreSQL, in the same run, and reports whether riverbus meets its
// targets. The riverbus-bench command (Main; `make bench` builds and runs it)
// calls Run.
//
// # Scenarios
//
//   - fanout-1pool, fanout-4pools: the fan-out catching up on a backlog of
//     events (Fanout.Pass in a loop) against River's InsertManyFast of the
//     same job rows. Target: riverbus/raw ≥ 0.8.
//   - drain: a River client with riverbus worker settings (workers.Config defaults) working the
//     jobs the fan-out created against the same number of raw jobs with
//     args of a few bytes, and the database time and statements per job
//     (as the latency scenarios, below). Target: riverbus/raw ≥ 0.9.
//   - drain-args: raw River draining jobs whose args are an event
//     envelope against raw River draining jobs with args of a few bytes
//     (River at its best): what the envelope in args costs River itself.
//   - latency-200, latency-1000: append commit → handler start with
//     the fan-out running, against River's Insert commit → Work start,
//     open loop from 32 goroutines, with commit → each step of the way
//     (the horizon round, the pool batch, River's fetch), and what each
//     event cost the database on each side (statement time and statements
//     per event, from pg_stat_statements when the server loads it: the
//     throwaway server does). Targets: at
//     200/s p50 ≤ 2.5× and p99 ≤ 2× raw River's; at
//     1,000/s p50 ≤ 1.5× raw River's; the offered rate reached.
//   - latency-200-loaded: latency-200 while both sides carry a background
//     load of 1,000/s: appends for another pool (riverbus), inserts into
//     another queue (raw River), worked by the same client. Same targets.
//   - many-pools: latency-200's pool beside 300 pools (at scale 1) of
//     every kind (plain path with a type or a tag filter, key-ordered,
//     transaction-grouped) that take none of its events, against the same
//     pool alone in the same run (the baseline column); then the
//     transactions a second of an idle fan-out (a riverbus.Client) with
//     301 pools, and of an idle worker process serving 301 queues, with the
//     default FetchPollInterval and with 1s, from pg_stat_database.
//     Targets: p50 ≤ 2× and p99 ≤ 3× alone; idle fan-out ≤ 100
//     transactions a second.
//   - rollback-gap: how long a rolled-back transaction holds the horizon
//     back. Target: p99 ≤ 100 ms. No raw River equivalent.
//   - backlog: catch-up time and peak RSS of a fan-out process (a child
//     process: this program re-executed with the hidden subcommand
//     fanoutproc, internal/bench/fanoutproc) over 100k and 1M events, once
//     per size. Target: peak RSS ≤ 100 MB, and at most 1.25× from 100k to 1M.
//   - ordered-vs-unordered: a pool with per-key ordering against the same
//     pool unordered (fan-out and drain throughput; here the baseline column
//     is the unordered pool). Skipped while fanout.PoolParams has no
//     Ordering field.
//   - big-transaction: one transaction of 100k events committed while
//     the fan-out runs; the time until each kind of pool (plain, key-ordered,
//     grouped, grouped by key) has delivered it, each kind alone and all
//     four together. No target: it shows that a pool's cost is linear in
//     the transaction's size and that no pool waits for another.
//   - live-during-rebuild: a live pool taking 50 events/s (commit → handler
//     start, worked by a River client) while another pool, created from the
//     beginning, rebuilds a 200k-event backlog; here the baseline column is
//     the same live pool with no rebuild. Target: p99 ≤ 250 ms.
//   - scale-out: against one database, 1, 2 and 4 fan-out processes
//     (internal/bench/fanoutproc) catching up together on a backlog for 8
//     pools, then 1, 4 and 8 worker processes (internal/bench/workerproc, a
//     River client with riverbus worker settings each) draining one pool's
//     jobs; jobs/s for each count, the baseline column being the 1-process
//     figure of the same run, and the busiest process's share of the jobs.
//     The processes are children started like backlog's. No target: on a
//     machine with few cores they share the CPUs with PostgreSQL.
//
// # Method
//
// Every measurement runs on a fresh database created from a migrated
// template (CREATE DATABASE … TEMPLATE …), so runs do not disturb each
// other. riverbus runs on the riverbus schema (River's migrations plus
// riverbus's); raw River runs on River's migrations alone, so the baseline is
// what an application without riverbus gets. Paired measurements alternate
// which side goes first from run to run (A/B, B/A, …), and a CHECKPOINT
// precedes every timed phase. Figures are the median over runs with the
// spread (min–max); ratios are computed per run, then summarised.
package bench
