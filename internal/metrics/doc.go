// Package metrics exports riverbus's state to Prometheus with the official
// client library.
//
// # Collector
//
// Collector reads the database at scrape time, with a timeout: the status
// snapshot of riverbus.Client.Status (the one `riverbus status` shows),
// read in one read-only transaction. The numbers are those of the whole
// deployment (every instance shares the database), not of the process that
// is scraped. A scrape whose queries fail reports riverbus_up 0 and logs
// the error.
//
// Per pool (label pool):
//
//	riverbus_pool_cursor                      every event <= cursor is a job (or filtered out)
//	riverbus_pool_checkpoint                  every job for an event <= checkpoint is finished
//	riverbus_pool_lag                         horizon - checkpoint (0 when the checkpoint is ahead)
//	riverbus_pool_events_fanned_out_total     jobs created from events, late ones included
//	riverbus_pool_late_events_delivered_total late events delivered
//	riverbus_pool_jobs                        River jobs by state (label state, every River state)
//	riverbus_pool_dead_letters                dead letters kept in riverbus_dead_letter
//	riverbus_pool_undeliverable_dead_letters  of those, events the fan-out could not turn into jobs
//	riverbus_pool_paused                      1 when the pool's fan-out is paused
//	riverbus_pool_ahead_of_log                how far its cursor, checkpoint or start is above the end of the log (0 normally)
//	riverbus_pool_checkpoint_held_seconds     how long the checkpoint has stood still behind its oldest unfinished job (0: none)
//	riverbus_pool_checkpoint_holder_attempts  attempts so far of that job (0: none); above 1, it is being retried
//	riverbus_pool_worker_slots                jobs of its queue the reporting processes can hold running at once
//	riverbus_pool_running_above_workers       its jobs running over a minute beyond those slots (0 normally)
//
// Global:
//
//	riverbus_up                      1 when the last scrape read the database
//	riverbus_scrape_duration_seconds how long the scrape's queries took
//	riverbus_horizon                 every sequence <= horizon is visible or will never commit
//	riverbus_horizon_age_seconds     since the horizon row last changed (database clock)
//	riverbus_last_sequence           last sequence handed out (committed, in flight or rolled back)
//	riverbus_last_committed_sequence highest sequence of a committed event (> horizon: events wait)
//	riverbus_open_gaps               open gap runs just above the horizon
//	riverbus_watched_skipped         sequences in skipped ranges watched for a late commit
//	riverbus_gaps_proven_dead_total  sequences proven rolled back
//	riverbus_gaps_skipped_total      sequences skipped by the gap timeout
//	riverbus_late_events_total       skipped sequences that committed after all
//	riverbus_horizon_problem         1 while an assumption of the gap proof is broken
//	                                 (labels problem, blocks; every problem, 0 included)
//	riverbus_retention_trimmed_through where the log begins: events at or below it may be deleted
//	riverbus_retention_events_trimmed_total events deleted by event retention
//	riverbus_retention_enabled            1 while a retention policy is set
//	riverbus_retention_keep_seconds       the policy's keep period (0: until consumed)
//	riverbus_oldest_event_age_seconds     how long ago the oldest event in the log was appended
//	riverbus_processes                    processes reporting (label state: live, stale)
//	riverbus_recent_errors                failures in the current run of an operation, over the processes
//	                                      (labels operation, subject: the pool or queue, or empty)
//	riverbus_recent_error_age_seconds     seconds since that operation last failed
//
// This process's fan-out (not read from the database; each process that
// runs one reports its own):
//
//	riverbus_fanout_round_seconds         histogram of the horizon rounds it ran
//	riverbus_fanout_batch_seconds{pool}   histogram of its pool batches that inserted jobs
//	riverbus_process_errors_total{operation,subject}  its failures (counted while the database refuses its report too)
//
// The checkpoint is the one last stored (by the client's checkpoint advancer, which
// `riverbus run` advances); the collector does not advance it.
//
// # Serving
//
// NewRegistry returns a registry with the Collector, the fan-out's
// histograms, and the Go runtime and process collectors; Handler serves it in the Prometheus exposition
// format, to be mounted at /metrics.
package metrics
