// Package poolmix makes many pools of every kind, each with a filter of its
// own, for the tests and benchmarks that measure what hundreds of pools
// cost: the fan-out must not pay per pool for events that concern few of
// them.
package poolmix

import (
	"fmt"

	"github.com/riverbus/riverbus/bustype"
)

// Params returns the params of n pools named other_000 and on, of every
// kind in turn: the plain path with a type filter, with a tag filter,
// key-ordered, transaction-grouped, and with both filters. Pool i takes
// only events of type "other.i", or tagged "tenant=other-i"; the last kind
// takes events of type typ tagged "tenant=other-i". None takes an untagged
// event, nor one whose type is typ without that tag.
func Params(n int, typ string) []bustype.PoolParams {
	out := make([]bustype.PoolParams, n)
	for i := range out {
		p := bustype.PoolParams{Name: fmt.Sprintf("other_%03d", i)}
		own, tag := fmt.Sprintf("other.%d", i), fmt.Sprintf("tenant=other-%d", i)
		switch i % 5 {
		case 0:
			p.EventTypes = []string{own}
		case 1:
			p.Tags = []string{tag}
		case 2:
			p.EventTypes, p.Ordering = []string{own}, bustype.OrderingKey
		case 3:
			p.Tags, p.Grouping = []string{tag}, bustype.GroupTransaction
		case 4:
			p.EventTypes, p.Tags = []string{typ}, []string{tag}
		}
		out[i] = p
	}
	return out
}
