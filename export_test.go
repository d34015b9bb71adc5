package riverbus

import (
	"testing"

	"github.com/riverbus/riverbus/internal/engine"
)

// InitTestSignals makes the test signals of the client's services record
// values, and returns them. Call it before Start.
func (c *Client) InitTestSignals(t *testing.T) (*engine.Services, *engine.CheckpointAdvancer) {
	s := c.fanout.Services()
	s.Horizon.TestSignals.Init(t)
	s.Pools.TestSignals.Init(t)
	s.Sweeper.TestSignals.Init(t)
	s.Retirer.TestSignals.Init(t)
	c.advancer.TestSignals.Init(t)
	return s, c.advancer
}
