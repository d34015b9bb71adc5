// Package schemadump writes the schema of a riverbus database as
// migrations/schema.sql holds it: pg_dump --schema-only, with what differs
// between runs and machines taken out, so that two databases with the same
// objects give the same text.
package schemadump

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/riverbus/riverbus/internal/pgserver"
)

// Header opens schema.sql: what it is and how to make it again.
const Header = `-- The riverbus schema as a fresh install ends with it: River's migrations,
-- riverbus's numbered migrations and the current texts of its functions and
-- triggers (migrations/sql/current), dumped by pg_dump --schema-only
-- --no-owner of PostgreSQL %d. Generated: do not edit. Regenerate with
--   go generate ./migrations     (or: make generate)
-- after changing a migration or a current text; TestSchemaSQLIsCurrent fails
-- until it is.
`

// Dump returns the normalised schema of the database at url, dumped by the
// pg_dump of the PostgreSQL binaries the tests use (pgserver.FindBinDir).
func Dump(ctx context.Context, url string) (string, error) {
	binDir, err := pgserver.FindBinDir()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "pg_dump"), "--schema-only", "--no-owner", "--dbname", url)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("pg_dump: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return Normalize(stdout.String()), nil
}

// Major returns the major version of the pg_dump Dump runs.
func Major() (int, error) {
	binDir, err := pgserver.FindBinDir()
	if err != nil {
		return 0, err
	}
	out, err := exec.Command(filepath.Join(binDir, "pg_dump"), "--version").Output()
	if err != nil {
		return 0, fmt.Errorf("pg_dump --version: %w", err)
	}
	var major int
	m := regexp.MustCompile(`(\d+)(\.\d+)?`).FindString(string(out))
	if _, err := fmt.Sscanf(m, "%d", &major); err != nil {
		return 0, fmt.Errorf("pg_dump --version %q: %w", out, err)
	}
	return major, nil
}

// dropped are the lines of a dump that say when, by what or for which run
// it was made rather than what the schema is: the versions of pg_dump and
// the server, and the random key of \restrict (pg_dump 17.6 and later).
var dropped = regexp.MustCompile(`(?m)^(-- Dumped (from|by) .*|\\(un)?restrict .*)\n`)

// Normalize takes out of a pg_dump what differs between runs and machines
// and squeezes runs of blank lines.
func Normalize(dump string) string {
	dump = dropped.ReplaceAllString(dump, "")
	dump = regexp.MustCompile(`\n{3,}`).ReplaceAllString(dump, "\n\n")
	return strings.TrimSpace(dump) + "\n"
}
