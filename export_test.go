package riverbus

import (
	"testing"

	"github.com/riverbus/riverbus/checkpoint"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/retention"
)

// InitTestSignals makes the test signals of the client's services record
// values, and returns them. Call it before Start.
func (c *Client) InitTestSignals(t *testing.T) (*fanout.Services, *checkpoint.Advancer) {
	s := c.fanout.Services()
	s.Horizon.TestSignals.Init(t)
	s.Pools.TestSignals.Init(t)
	s.Sweeper.TestSignals.Init(t)
	s.Retirer.TestSignals.Init(t)
	c.advancer.TestSignals.Init(t)
	return s, c.advancer
}

// InitRetentionTestSignals makes the retention service's test signals
// record values, and returns it. Call it before Start.
func (c *Client) InitRetentionTestSignals(t *testing.T) *retention.Service {
	c.retainer.TestSignals.Init(t)
	return c.retainer
}

// WithSchemaCode returns a copy of cfg whose Client's code knows schema
// version code: a test plays a newer build with it.
func WithSchemaCode(cfg Config, code int) *Config {
	cfg.schemaCode = code
	return &cfg
}
