package hedge

import "time"

// A surge of calls holds a key's hedges back. Hedges spend the spare
// capacity of the upstream, and when calls suddenly come much faster than
// they did, that capacity may be gone before the latencies show it: where
// the upstream cancels the work of a lost attempt, hedges can even hide an
// overload that goes on growing under them. So each key keeps two moving
// averages of the time between its calls, over about 64 calls and about
// 1,024. While the short one is below 2/3 of the long one (calls arrive
// more than 1.5 times as fast as they have been), the key sends no hedge;
// after it, the recent primaries must match the plan for calmCalls in a
// row before hedges go out again, as after any change. (A client that
// makes its calls one after another sees a surge when a run of them is
// fast, and hedges less for a while: the cost of telling an overload in
// 60 calls.)

// The moving averages of the gap between calls, in ns: weights of
// 1/2^gapShort and 1/2^gapLong per call, and the first gapWarm calls only
// start them.
const (
	gapShort = 6
	gapLong  = 10
	gapWarm  = 64
)

// arrive takes the gap since the key's last call into its averages, and
// holds hedges back while the calls surge.
func (k *adaptiveKey) arrive() {
	now := k.s.now()
	last := k.arrived.Swap(now)
	n := k.calls.Add(1)
	if n == 1 {
		return
	}
	gap := max(now-last, 0)
	short, long := k.gapShort.Load(), k.gapLong.Load()
	if n == 2 {
		short, long = gap, gap
	}
	// The first gap has no usual one to be weighed against, and a client
	// that calls once as it starts and idles until its traffic comes
	// makes it a pause: the second gap caps it at four of its own, as the
	// usual gap caps every later one. A second gap of zero (two calls at
	// one instant of the clock) caps it too: the averages start from
	// zero, and no surge shows until they have grown.
	if n == 3 {
		short, long = min(short, 4*gap), min(long, 4*gap)
	}
	// A pause is no capacity: a gap longer than four times the usual one
	// (a client idle between bursts of calls) counts as four times the
	// usual one, so that the next burst at the old pace is not taken for
	// a surge. Four, not two: one gap in seven between Poisson arrivals
	// is longer than twice the mean, and capping those makes the usual
	// gap look a seventh shorter, which hides a step overload's surge
	// from the averages for longer.
	if n > 2 && long > 0 {
		gap = min(gap, 4*long)
	}
	// Load and Store, not compare-and-swap: an update lost to a
	// concurrent call moves an average by less than one gap's weight.
	short += (gap - short) >> gapShort
	long += (gap - long) >> gapLong
	k.gapShort.Store(short)
	k.gapLong.Store(long)
	if n > gapWarm && 3*short < 2*long {
		k.calm.Store(0)
	}
}

// quickening reports whether the calls come more than 1.25 times as fast
// as they have been (the short average of the gaps is below 4/5 of the
// long one): no hedge is scheduled while they do. The surge above tells
// a step to 2.2 times the rate after about 70 calls (the median of the
// draws), and where started work runs on, every hedge sent before then
// adds work that a queue which never empties keeps for the rest of the
// overload. Below 4/5, the step is seen after about 30 calls, while
// steady Poisson arrivals sit there 3 calls in 1,000: a pause of a few
// calls, not the 250 a surge costs, as the watch is left as it was.
func (k *adaptiveKey) quickening() bool {
	return k.calls.Load() > gapWarm && 5*k.gapShort.Load() < 4*k.gapLong.Load()
}

// now returns the time since the state was made, in ns, by the
// Adaptive's clock.
func (s *adaptiveState) now() int64 {
	if s.clk == nil {
		return int64(time.Since(s.origin))
	}
	return int64(s.clk.Since(s.origin))
}
