package riverbus

import (
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverbus/riverbus/internal/database"
)

// ConfigurePool makes every connection of a pool built from cfg run with
// riverbus's own session limits, set right after it connects (after cfg's
// own AfterConnect, which it keeps), so that what a DBA set for the
// database or the role (ALTER DATABASE … SET statement_timeout) cannot cut
// riverbus's statements or River's short:
//
//   - statement_timeout 1 min: longer than River's own bounds on its
//     statements (10 s for a fetch or a completion, 30 s for its
//     maintenance) and than a fan-out batch needs, so it never cuts one that
//     would finish, while a statement that runs away still ends;
//   - lock_timeout 30 s: riverbus's waits for locks that others may hold
//     set shorter bounds of their own and name the holder;
//   - idle_in_transaction_session_timeout 1 min: riverbus's transactions
//     are idle only between their statements; a handler's transaction
//     (workers.RunExactlyOnce) lasts at most its job's timeout, 1 min by
//     default.
//
// A handler whose own statements need other limits sets them in its
// transaction (SET LOCAL). Build the pool a Client runs on this way when the
// database or the role may carry such settings; Client.Start refuses a
// pool whose sessions are limited below these values. The riverbus
// commands configure their pools so.
//
//	cfg, err := pgxpool.ParseConfig(databaseURL)
//	if err != nil { ... }
//	riverbus.ConfigurePool(cfg)
//	db, err := pgxpool.NewWithConfig(ctx, cfg)
func ConfigurePool(cfg *pgxpool.Config) {
	cfg.AfterConnect = database.ServiceSession.AfterConnect(cfg.AfterConnect)
}
