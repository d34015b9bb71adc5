package fanout

import (
	"slices"
	"time"
)

// gapRow is an open gap: a run of missing sequences just above the horizon,
// seen while a higher sequence was visible.
type gapRow struct {
	first, last int64
	bound       uint64
	age         time.Duration
}

// skippedRange is a run of sequences passed by the gap timeout; newLate
// says the round's read saw a committed event inside it that is not yet
// recorded as late.
type skippedRange struct {
	first, last int64
	bound       uint64
	newLate     bool
}

// snapshot is what a round knows about running transactions.
type snapshot struct {
	xmax uint64
	xip  []uint64
}

// provesEnded reports whether every transaction with an xid below bound has
// ended, as seen in s.
func (s snapshot) provesEnded(bound uint64) bool {
	if bound >= s.xmax {
		return false
	}
	for _, x := range s.xip {
		if x < bound {
			return false
		}
	}
	return true
}

// walkInput is one round's view; walkResult is what it decides. walk is a
// pure function so the decision rules can be tested case by case.
type walkInput struct {
	horizon    int64
	snap       snapshot
	visible    []int64 // visible sequences above the horizon, ascending
	gaps       []gapRow
	skipped    []skippedRange
	gapTimeout time.Duration
	// noProof: an assumption of the proof is broken. Nothing is proven
	// dead, skipped or forgotten; contiguous visible sequences still pass.
	noProof bool
	// frozen: the sequence is below the horizon. The horizon does not move.
	frozen bool
}

type walkResult struct {
	horizon     int64
	newGaps     []gapRow // bound to be filled with the round's xid
	deadGaps    []int64  // first_sequence of gap rows passed (proven dead or skipped)
	provenDead  int64    // sequences passed because proven dead
	skip        []gapRow // runs passed by timeout, with their gap's bound
	skipped     int64    // missing sequences in them (as far as the page shows)
	late        []int64  // first of ranges with late events to record
	forgotten   []int64  // first of ranges now proven: to delete
	holding     bool     // the round stopped at an open gap
	oldestGapAt time.Duration
}

func walk(in walkInput) walkResult {
	res := walkResult{horizon: in.horizon}
	h := in.horizon
	i := 0
	for i < len(in.visible) && !in.frozen {
		if in.visible[i] <= h {
			i++
			continue
		}
		if in.visible[i] == h+1 {
			h++
			i++
			continue
		}
		// h+1 .. visible[i]-1 is missing while visible[i] is visible.
		next := h + 1
		g := findGap(in.gaps, next)
		if g == nil {
			res.holding = true
			break
		}
		// Missing in next..g.last: its length less what is visible in it.
		missing := g.last - next + 1 - countBetween(in.visible, next, g.last)
		switch {
		case in.noProof:
			res.holding = true
			res.oldestGapAt = g.age
		case in.snap.provesEnded(g.bound):
			// Every sequence of the run is visible or dead: pass it all.
			res.provenDead += missing
		case g.age >= in.gapTimeout:
			res.skip = append(res.skip, gapRow{first: next, last: g.last, bound: g.bound})
			res.skipped += missing
		default:
			res.holding = true
			res.oldestGapAt = g.age
		}
		if res.holding {
			break
		}
		res.deadGaps = append(res.deadGaps, g.first)
		h = g.last
	}
	res.horizon = h
	// Record every missing run above the horizon that no gap row covers yet,
	// all with this round's bound, so a burst of rollbacks is proven in the
	// next round instead of one gap per round.
	prev := h
	for _, v := range in.visible {
		if v <= h {
			continue
		}
		for s := prev + 1; s < v; {
			if g := findGap(in.gaps, s); g != nil {
				s = g.last + 1
				continue
			}
			end := v - 1
			for _, g := range in.gaps {
				if g.first > s && g.first <= end {
					end = g.first - 1
				}
			}
			res.newGaps = append(res.newGaps, gapRow{first: s, last: end})
			s = end + 1
		}
		prev = v
	}
	for _, s := range in.skipped {
		if s.newLate {
			res.late = append(res.late, s.first)
		}
		if !in.noProof && in.snap.provesEnded(s.bound) {
			res.forgotten = append(res.forgotten, s.first)
		}
	}
	return res
}

func findGap(gaps []gapRow, seq int64) *gapRow {
	for i := range gaps {
		if gaps[i].first <= seq && seq <= gaps[i].last {
			return &gaps[i]
		}
	}
	return nil
}

// countBetween counts the values of sorted within [lo, hi].
func countBetween(sorted []int64, lo, hi int64) int64 {
	a, _ := slices.BinarySearch(sorted, lo)
	b, found := slices.BinarySearch(sorted, hi)
	if found {
		b++
	}
	return int64(b - a)
}
