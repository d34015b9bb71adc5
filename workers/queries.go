package workers

const (
	// sqlJobLockForWork locks a job for RunExactlyOnce.
	sqlJobLockForWork = `SELECT state::text, attempt FROM river_job WHERE id = $1 FOR UPDATE`
)
