package riverbus

import (
	"context"
	"time"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/retention"
)

// RetentionOpts are the optional settings of RetentionPlan and
// RetentionTrim.
type RetentionOpts struct {
	// Keep previews another keep period than the policy's (RetentionPlan
	// only: RetentionTrim always follows the stored policy). Nil: the
	// policy's.
	Keep *time.Duration
	// BatchSize is the most events one step covers (and deletes in one
	// transaction). Zero: 5,000; at most 100,000.
	BatchSize int
	// MaxBatches stops after this many steps. Zero: no limit.
	MaxBatches int
	// Progress, when set, is called after each step with the totals so
	// far.
	Progress func(bustype.RetentionPlan)
}

func (o *RetentionOpts) internal() *retention.Opts {
	if o == nil {
		return nil
	}
	return &retention.Opts{Keep: o.Keep, BatchSize: o.BatchSize, MaxBatches: o.MaxBatches, Progress: o.Progress}
}

// RetentionPolicy returns the event retention policy and where the log
// begins (docs/operations.md, "Event retention").
func (c *Client) RetentionPolicy(ctx context.Context) (bustype.RetentionPolicy, error) {
	return retention.GetPolicy(ctx, c.db)
}

// RetentionSet sets the event retention policy: with enabled, events are
// deleted once they are older than keep (zero: at once) and every pool has
// passed them; without, nothing is deleted. It needs the schema owner's
// rights, as pool create does. A Client running the retention service
// applies it at its next interval.
func (c *Client) RetentionSet(ctx context.Context, enabled bool, keep time.Duration) (bustype.RetentionPolicy, error) {
	return retention.SetPolicy(ctx, c.db, enabled, keep)
}

// RetentionPlan is the dry run: what RetentionTrim would delete now (the
// events, their range and age, the rule that holds the floor). It deletes
// nothing; opts may be nil.
func (c *Client) RetentionPlan(ctx context.Context, opts *RetentionOpts) (*bustype.RetentionPlan, error) {
	return retention.Plan(ctx, c.db, opts.internal())
}

// RetentionTrim deletes what the policy lets go now, in batches, each a
// transaction of its own: when ctx ends it returns what it deleted so far
// and ctx's error, and the next call resumes there. With no policy set it
// deletes nothing. opts may be nil.
func (c *Client) RetentionTrim(ctx context.Context, opts *RetentionOpts) (*bustype.RetentionPlan, error) {
	return retention.Trim(ctx, c.db, opts.internal())
}
