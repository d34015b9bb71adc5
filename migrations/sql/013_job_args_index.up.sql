-- River's GIN index on river_job.args (River's migration 002) holds an
-- entry for every key and every value of every row version, and a job
-- writes a new row version at each state change: inserted, running,
-- completed, and for an ordered pool's job pending → available first. A
-- riverbus job's args are an event envelope, with the event's data, so
-- the index was most of what inserting and working those jobs cost
-- (docs/performance.md).
--
-- Nothing in River, River UI or riverbus searches args through it (River
-- filters on metadata, riverbus reads args through its own expression
-- indexes). So riverbus jobs, the ones whose args carry a
-- global_sequence, stay out of it; other jobs in the same database keep
-- theirs, for a query that says so (args @> ... AND NOT args ?
-- 'global_sequence'). The name stays River's, so River's reindexer and
-- River's own migrations still find it.
--
-- The build reads river_job once and blocks its writes meanwhile: on a
-- table of millions of jobs, migrate at a quiet moment.
DROP INDEX river_job_args_index;
CREATE INDEX river_job_args_index ON river_job USING GIN (args) WHERE NOT (args ? 'global_sequence');
