package migrations

// UpWithMigrations is up with the riverbus migrations all: tests add one
// that must wait.
var UpWithMigrations = up
