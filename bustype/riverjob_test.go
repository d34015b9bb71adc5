package bustype_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
)

// bustype mirrors River's job states and attempt errors so that it (and
// outbox, which uses it) imports nothing of River. These pin the mirror to
// the River version in go.mod: an upgrade that adds a state or a field
// fails here.
func TestJobStatesAreRiversStates(t *testing.T) {
	t.Parallel()
	var ours []string
	for _, s := range bustype.JobStates() {
		ours = append(ours, string(s))
	}
	var rivers []string
	for _, s := range rivertype.JobStates() {
		rivers = append(rivers, string(s))
	}
	require.Equal(t, rivers, ours)
}

func TestAttemptErrorIsRiversJSON(t *testing.T) {
	t.Parallel()
	in := rivertype.AttemptError{At: time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC), Attempt: 3, Error: "boom", Trace: "goroutine 1"}
	b, err := json.Marshal(in)
	require.NoError(t, err)
	var ours bustype.AttemptError
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&ours))
	require.Equal(t, bustype.AttemptError{At: in.At, Attempt: 3, Error: "boom", Trace: "goroutine 1"}, ours)
	require.Equal(t, reflect.TypeOf(in).NumField(), reflect.TypeOf(ours).NumField(), "River's AttemptError has fields bustype does not mirror")
}
