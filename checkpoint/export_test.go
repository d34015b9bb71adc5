package checkpoint

// SQLAdvance lets the tests EXPLAIN the query Advance runs.
const SQLAdvance = sqlAdvance
