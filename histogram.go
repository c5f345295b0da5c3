package hedge

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// The histogram keeps latencies in log-spaced buckets: 32 per power of
// two, so a bucket is at most 1/32 of its lower edge wide and its midpoint
// is within 1/64 (1.6 %) of any latency in it. The index comes from the
// bit length and the next five bits: no logarithm, no lock, no
// allocation on the recording path. Latencies below 1µs share the first
// bucket and those above 2^37 ns (about 137 s) the last.
const (
	subBits    = 5
	subBuckets = 1 << subBits
	minExp     = 10 // 2^10 ns ≈ 1µs
	maxExp     = 37 // 2^37 ns ≈ 137 s
	numBuckets = (maxExp - minExp + 1) * subBuckets
)

func bucketOf(d time.Duration) int {
	v := uint64(max(d, 0))
	if v < 1<<minExp {
		return 0
	}
	e := bits.Len64(v) - 1
	if e > maxExp {
		return numBuckets - 1
	}
	m := int(v>>(e-subBits)) & (subBuckets - 1)
	return (e-minExp)*subBuckets + m
}

// bucketLo is a bucket's lower edge. The first bucket also holds every
// latency below it: its lower edge is 0.
func bucketLo(i int) time.Duration {
	if i <= 0 {
		return 0
	}
	e := minExp + i/subBuckets
	m := uint64(i % subBuckets)
	return time.Duration((subBuckets + m) << (e - subBits))
}

// bucketHi is a bucket's upper edge: the next one's lower edge.
func bucketHi(i int) time.Duration {
	if i == 0 {
		return bucketLo(1)
	}
	e := minExp + i/subBuckets
	m := uint64(i % subBuckets)
	return time.Duration((subBuckets + m + 1) << (e - subBits))
}

// bucketMid is the latency a bucket stands for: its midpoint.
func bucketMid(i int) time.Duration {
	e := minExp + i/subBuckets
	m := uint64(i % subBuckets)
	lo := (subBuckets + m) << (e - subBits)
	width := uint64(1) << (e - subBits)
	return time.Duration(lo + width/2)
}

// histogram counts latencies. Safe for concurrent use; the zero value is
// empty.
type histogram struct {
	counts [numBuckets]atomic.Uint32
}

func (h *histogram) add(d time.Duration) { h.counts[bucketOf(d)].Add(1) }

func (h *histogram) reset() {
	for i := range h.counts {
		h.counts[i].Store(0)
	}
}

// snapshot sums hs bucket by bucket, reading each counter once, so that
// every total and scan over it agrees however hs change meanwhile.
func snapshot(hs ...*histogram) (c [numBuckets]uint64, total uint64) {
	for _, h := range hs {
		for i := range h.counts {
			n := uint64(h.counts[i].Load())
			c[i] += n
			total += n
		}
	}
	return c, total
}

// quantile returns the latency at quantile q of the union of hs: the
// midpoint of the bucket holding the ceil(q·n)-th smallest sample. ok is
// false when hs hold no samples.
func quantile(q float64, hs ...*histogram) (d time.Duration, ok bool) {
	c, total := snapshot(hs...)
	if total == 0 {
		return 0, false
	}
	rank := uint64(q*float64(total) + 0.999999)
	rank = min(max(rank, 1), total)
	var seen uint64
	for i := range numBuckets {
		seen += c[i]
		if seen >= rank {
			return bucketMid(i), true
		}
	}
	return bucketMid(numBuckets - 1), true
}
