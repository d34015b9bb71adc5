package webhook

import "github.com/riverbus/riverbus/internal/riversql"

// sqlLogEvents reads, for a job of pool $1 that names the events of
// sequences $2 with envelopes $3 (each without late), the pool's queue,
// grouping and ordering, and per event, in the job's order: whether the log
// holds it, whether the pool's filter matches it, its type, key,
// transaction id and occurred_at, the envelope's fields that differ from
// the log's (jsonb equality; a version missing from args made before events
// had versions is 1; occurred_at is compared in Go, as timestamps;
// a reference to a big event's payload, bustype.EventJobRef, has no data
// and metadata to compare, and is one only for an event the fan-out would
// have made one of), and the log's envelopes (one jsonb array: a text array
// would escape a big event's text once more, and the worker parse it
// back). One round trip: the pool by its name and each event by its
// sequence, both primary keys.
const sqlLogEvents = `WITH p AS (
	SELECT queue, event_types, tags, grouping, ordering FROM riverbus_pool WHERE name = $1
),
c AS (
	SELECT c.ord, e.global_sequence IS NOT NULL AS found,
		coalesce(e.tags @> p.tags AND (cardinality(p.event_types) = 0 OR e.type = ANY(p.event_types)), false) AS matches,
		e.type, e.key, e.transaction_id::text AS txid, e.occurred_at,
		array_to_string(array_remove(ARRAY[
			CASE WHEN c.claimed->'event_id' IS DISTINCT FROM to_jsonb(e.event_id) THEN 'event_id' END,
			CASE WHEN c.claimed->'type' IS DISTINCT FROM to_jsonb(e.type) THEN 'type' END,
			CASE WHEN c.claimed->'key' IS DISTINCT FROM to_jsonb(e.key) THEN 'key' END,
			CASE WHEN coalesce(nullif(c.claimed->'tags', 'null'), '[]') IS DISTINCT FROM to_jsonb(e.tags) THEN 'tags' END,
			CASE WHEN NOT c.ref AND c.claimed->'data' IS DISTINCT FROM e.data THEN 'data' END,
			CASE WHEN NOT c.ref AND c.claimed->'metadata' IS DISTINCT FROM e.metadata THEN 'metadata' END,
			CASE WHEN coalesce(c.claimed->'version', '1') IS DISTINCT FROM to_jsonb(e.version) THEN 'version' END,
			CASE WHEN c.ref AND (c.claimed->'payload_in_log' IS DISTINCT FROM 'true' OR c.claimed ?| '{data,metadata}'
				OR e.global_sequence IS NOT NULL AND NOT (` + riversql.PayloadBig + `)) THEN 'payload_in_log' END,
			CASE WHEN c.claimed - '{global_sequence,event_id,type,key,tags,data,metadata,occurred_at,version,payload_in_log}'::text[] <> '{}'
				THEN 'fields of its own' END
		], NULL), ', ') AS differs,
		` + riversql.EventEnvelope + ` AS envelope
	FROM (SELECT u.*, u.claimed ? 'payload_in_log' AS ref
		FROM unnest($2::bigint[], $3::jsonb[]) WITH ORDINALITY AS u(seq, claimed, ord)) c
	LEFT JOIN riverbus_event e ON e.global_sequence = c.seq
	LEFT JOIN p ON true
)
SELECT EXISTS (SELECT 1 FROM p), (SELECT queue FROM p), (SELECT grouping FROM p), (SELECT ordering FROM p),
	array_agg(found ORDER BY ord), array_agg(matches ORDER BY ord), array_agg(type ORDER BY ord),
	array_agg(key ORDER BY ord), array_agg(txid ORDER BY ord), array_agg(occurred_at ORDER BY ord),
	array_agg(differs ORDER BY ord), jsonb_agg(envelope ORDER BY ord)
FROM c`
