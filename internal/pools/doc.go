// Package pools creates, reads and changes pools: the rows of
// riverbus_pool (a pool's filter, ordering, grouping, River queue and job
// settings, and its cursor) and its start point in riverbus_pool_start
// (docs/design.md §3). Pausing a pool pauses its River queue too when no other
// pool shares it. The root package's Client exposes these as PoolCreate,
// PoolUpdate, PoolGet, PoolList, PoolPause, PoolResume, PoolReset and
// PoolDelete.
package pools
