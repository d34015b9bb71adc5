package cli

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/workers"
)

// newClient returns the riverbus client of this process over db, configured
// from the environment and the flags; ws, when set, are its workers.
// Every command goes through it: the CLI is flag handling over the client.
func (a *app) newClient(db *pgxpool.Pool, ws *riverbus.Workers, fanoutDisabled bool) (*riverbus.Client, error) {
	return riverbus.NewClient(db, &riverbus.Config{
		Fanout: fanout.Config{
			GapTimeout:       a.cfg.GapTimeout,
			GapCheckInterval: a.cfg.GapCheckInterval,
			PollInterval:     a.cfg.PollInterval,
			BatchSize:        a.cfg.BatchSize,
			Workers:          a.cfg.FanoutWorkers,
			Logger:           a.logger,
			TracerProvider:   a.tracerProvider,
		},
		FanoutDisabled: fanoutDisabled,
		Workers:        ws,
		Work:           workers.Config{Logger: a.riverLogger, TracerProvider: a.tracerProvider},
		Logger:         a.logger,
	})
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
