package fanout

// The jobs' args. Each shape is a bustype type (EventJob, GroupJob, and
// their dead-letter stubs), built by the database from the events' rows on
// both paths (eventEnvelope, sqlInsertJobs; envelope_test.go pins them to
// the types that handlers decode); only the stubs are encoded here
// (unit.stub).
