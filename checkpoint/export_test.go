package checkpoint

// SQLAdvance lets the tests EXPLAIN the query Advance runs.
const SQLAdvance = sqlAdvance

// SQLHolder lets the tests EXPLAIN the query GetHolder runs.
const SQLHolder = sqlHolder

// SQLAdvanceAll lets the tests EXPLAIN the query AdvanceAll runs.
const SQLAdvanceAll = sqlAdvanceAll
