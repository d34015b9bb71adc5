package outbox_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/outbox"
)

func TestRead(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)

	keyed := func(key, typ string, tags ...string) outbox.Event {
		e := event(typ, tags...)
		e.Key = key
		return e
	}
	appended, err := outbox.Append(ctx, bundle.db,
		keyed("c1", "CourseDefined", "course=c1"),                   // 1
		keyed("c2", "CourseDefined", "course=c2"),                   // 2
		keyed("c1", "StudentSubscribed", "course=c1", "student=s1"), // 3
		keyed("c2", "StudentSubscribed", "course=c2", "student=s1"), // 4
		keyed("c1", "StudentSubscribed", "student=s2", "course=c1"), // 5
		keyed("c1", "CourseRenamed", "course=c1"),                   // 6
		keyed("", "Other"), // 7
		keyed("c3", "StudentSubscribed", "course=c3", "student=s1", "late=1"), // 8
	)
	require.NoError(t, err)
	require.Equal(t, int64(8), appended[7].GlobalSequence)

	tests := []struct {
		name   string
		params outbox.ReadParams
		want   []int64
	}{
		{"All", outbox.ReadParams{}, []int64{1, 2, 3, 4, 5, 6, 7, 8}},
		{"Type", outbox.ReadParams{Query: outbox.Query{{Types: []string{"CourseDefined"}}}}, []int64{1, 2}},
		{"Types", outbox.ReadParams{Query: outbox.Query{{Types: []string{"CourseRenamed", "CourseDefined"}}}}, []int64{1, 2, 6}},
		{"Tag", outbox.ReadParams{Query: outbox.Query{{Tags: []string{"course=c1"}}}}, []int64{1, 3, 5, 6}},
		{"AllTags", outbox.ReadParams{Query: outbox.Query{{Tags: []string{"student=s1", "course=c1"}}}}, []int64{3}},
		{"TypeAndTag", outbox.ReadParams{Query: outbox.Query{{Types: []string{"StudentSubscribed"}, Tags: []string{"student=s1"}}}}, []int64{3, 4, 8}},
		{"AnyItem", outbox.ReadParams{Query: outbox.Query{{Types: []string{"CourseDefined"}, Tags: []string{"course=c2"}}, {Tags: []string{"student=s2"}}}}, []int64{2, 5}},
		{"OverlappingItems", outbox.ReadParams{Query: outbox.Query{{Types: []string{"CourseDefined"}}, {Tags: []string{"course=c1"}}, {Types: []string{"CourseDefined"}}}}, []int64{1, 2, 3, 5, 6}},
		{"NoMatch", outbox.ReadParams{Query: outbox.Query{{Types: []string{"Nope"}}, {Tags: []string{"course=c9"}}}}, []int64{}},
		{"Key", outbox.ReadParams{Key: "c1"}, []int64{1, 3, 5, 6}},
		{"KeyAndType", outbox.ReadParams{Key: "c1", Query: outbox.Query{{Types: []string{"StudentSubscribed"}}}}, []int64{3, 5}},
		{"KeyAndTag", outbox.ReadParams{Key: "c1", Query: outbox.Query{{Tags: []string{"student=s2"}}}}, []int64{5}},
		{"KeyAndItems", outbox.ReadParams{Key: "c2", Query: outbox.Query{{Types: []string{"CourseDefined"}}, {Types: []string{"StudentSubscribed"}, Tags: []string{"student=s1"}}}}, []int64{2, 4}},
		{"After", outbox.ReadParams{After: 3}, []int64{4, 5, 6, 7, 8}},
		{"AfterLimit", outbox.ReadParams{After: 3, Limit: 2}, []int64{4, 5}},
		{"Limit", outbox.ReadParams{Limit: 3}, []int64{1, 2, 3}},
		{"TagLimit", outbox.ReadParams{Query: outbox.Query{{Tags: []string{"course=c1"}}}, Limit: 2}, []int64{1, 3}},
		{"TagAfter", outbox.ReadParams{Query: outbox.Query{{Tags: []string{"course=c1"}}}, After: 3}, []int64{5, 6}},
		{"ItemsAfterLimit", outbox.ReadParams{Query: outbox.Query{{Types: []string{"CourseRenamed"}}, {Tags: []string{"student=s1"}}}, After: 3, Limit: 2}, []int64{4, 6}},
		{"KeyAfterLimit", outbox.ReadParams{Key: "c1", After: 3, Limit: 1}, []int64{5}},
		{"AfterEnd", outbox.ReadParams{After: 8}, []int64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			events, err := outbox.Read(ctx, bundle.db, tt.params)
			require.NoError(t, err)
			require.Equal(t, tt.want, sequences(events))
			for _, e := range events {
				require.Equal(t, appended[e.GlobalSequence-1].EventID, e.EventID)
			}
		})
	}

	// Inside a transaction Read sees the transaction's own events; outside,
	// only committed ones.
	tx, err := bundle.db.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = outbox.AppendTx(ctx, tx, keyed("c1", "CourseRenamed", "course=c1"))
	require.NoError(t, err)
	events, err := outbox.Read(ctx, tx, outbox.ReadParams{Query: outbox.Query{{Types: []string{"CourseRenamed"}}}})
	require.NoError(t, err)
	require.Equal(t, []int64{6, 9}, sequences(events))
	events, err = outbox.Read(ctx, bundle.db, outbox.ReadParams{Query: outbox.Query{{Types: []string{"CourseRenamed"}}}})
	require.NoError(t, err)
	require.Equal(t, []int64{6}, sequences(events))
}
