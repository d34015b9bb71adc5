// Command genschema writes migrations/schema.sql: it starts a throwaway
// PostgreSQL, migrates a fresh database with migrations.Up and writes its
// normalised schema (package schemadump) to the file named by its argument.
// go generate ./migrations runs it.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverbus/riverbus/internal/pgserver"
	"github.com/riverbus/riverbus/migrations"
	"github.com/riverbus/riverbus/migrations/internal/schemadump"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: genschema FILE")
		os.Exit(2)
	}
	if err := run(context.Background(), os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "genschema:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, path string) error {
	srv, err := pgserver.Start(ctx, pgserver.Opts{})
	if err != nil {
		return err
	}
	defer srv.Stop() //nolint:errcheck
	admin, err := pgxpool.New(ctx, srv.URL("postgres"))
	if err != nil {
		return err
	}
	_, err = admin.Exec(ctx, "CREATE DATABASE riverbus_schema")
	admin.Close()
	if err != nil {
		return err
	}
	url := srv.URL("riverbus_schema")
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	_, err = migrations.Up(ctx, pool)
	pool.Close()
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	dump, err := schemadump.Dump(ctx, url)
	if err != nil {
		return err
	}
	major, err := schemadump.Major()
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(fmt.Sprintf(schemadump.Header, major)+"\n"+dump), 0o644)
}
