package ui

// All SQL of the ui package.

// sqlRiverTablesExist reports whether River's job table is on the search
// path.
const sqlRiverTablesExist = `SELECT to_regclass('river_job') IS NOT NULL`
