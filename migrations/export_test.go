package migrations

// UpWithMigrations is up with the riverbus migrations all: tests add one
// that must wait.
var UpWithMigrations = up

// OldestCode reads a migration's riverbus:oldest-code line.
var OldestCode = oldestCode
