package cli

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/workers"
)

// newClient returns the riverbus client of this process over db, configured
// from the environment and the flags; ws, when set, are its workers.
// Every command goes through it: the CLI is flag handling over the client.
func (a *app) newClient(db *pgxpool.Pool, ws *workers.Registry, fanoutDisabled bool) (*riverbus.Client, error) {
	return riverbus.NewClient(db, &riverbus.Config{
		Fanout:         a.fanoutConfig(),
		FanoutDisabled: fanoutDisabled,
		Retention:      riverbus.RetentionConfig{Interval: orNever(a.cfg.RetentionInterval)},
		Workers:        ws,
		Work:           a.workConfig(),
		Logger:         a.logger,
		ProcessName:    a.processName,
	})
}

// fanoutConfig is the settings of this process's fan-out.
func (a *app) fanoutConfig() fanout.Config {
	return fanout.Config{
		GapTimeout:       a.cfg.GapTimeout,
		GapCheckInterval: a.cfg.GapCheckInterval,
		PollInterval:     a.cfg.PollInterval,
		BatchSize:        a.cfg.BatchSize,
		BatchBytes:       a.cfg.BatchBytes,
		Workers:          a.cfg.FanoutWorkers,
		MarkInterval:     a.cfg.MarkInterval,
		Logger:           a.logger,
		TracerProvider:   a.tracerProvider,
	}
}

// workConfig is the River settings of this process's workers.
func (a *app) workConfig() workers.Config {
	return workers.Config{
		CompletedJobRetentionPeriod: orNever(a.cfg.CompletedJobRetention),
		CancelledJobRetentionPeriod: orNever(a.cfg.CancelledJobRetention),
		DiscardedJobRetentionPeriod: orNever(a.cfg.DiscardedJobRetention),
		FetchPollInterval:           a.cfg.FetchPollInterval,
		Logger:                      a.riverLogger,
		TracerProvider:              a.tracerProvider,
	}
}

// orNever turns the environment's 0 (never, forever) into the library's -1.
func orNever(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// operator connects and returns a client for operator commands (it runs
// nothing) and a function that closes the connection.
func (a *app) operator(ctx context.Context) (*riverbus.Client, func(), error) {
	db, err := a.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	client, err := a.newClient(db, nil, true)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return client, db.Close, nil
}
