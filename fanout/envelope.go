package fanout

// The jobs' args. Each shape is a Go type (workers.Args, workers.GroupArgs,
// and their dead-letter stubs in bustype), built by the database from the
// events' rows on both paths (eventEnvelope, sqlInsertJobs; envelope_test.go pins them to
// the types that handlers decode); only the stubs are encoded here
// (unit.stub).
