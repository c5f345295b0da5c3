package hedge

import "time"

// How a key of an Adaptive treats tied calls (see Started): it learns
// where its primaries' time goes, and while much of it is spent waiting
// for a worker, it sends no hedge against work that has started.
//
// A hedge sent while every attempt of its call still waits in a queue
// costs nothing: whichever starts first cancels the others. A hedge sent
// while an attempt runs races that attempt's work, and whichever of the
// two loses, the work it did is lost. Where the slowness is in the work
// and workers are idle, that is what hedging is for. Where calls wait in
// queues, a worker that a losing copy holds is one that a queued call
// waits for, and the work lost is a share of the servers' time that the
// queues feel at once. So each key keeps the moving share of their
// latency that its primaries spent before their start signal, over about
// 256 of them, less the floor that no queue causes: a signal comes back
// a round trip after its request left, which in a call that takes little
// more than its round trip is most of it. The floor is the least time
// to a start signal of recent primaries, those that found a worker free.
// While the share is a third or more, a hedge due while an attempt
// of the call has reported its start is refused (an attempt owed to a
// retryable result is not: it replaces a copy). The share grows with
// the load; docs/lab.md ("Ties and primaries first") has what the rule
// does in the load lab. A key whose servers send no start signal learns
// nothing here, and hedges as before.

// The moving share of their latency that primaries waited, in units of
// 1/shareOne, with a weight of 1/2^waitShift per primary; at waitHigh or
// more, the key is taken to queue.
const (
	waitShift = 8
	waitHigh  = shareOne / 3
)

// waited records that a primary reported its start after wait, and
// answered after ran, both from the call's start, as a share of ran less
// the floor.
func (k *adaptiveKey) waited(wait, ran time.Duration) {
	if ran <= 0 || wait <= 0 {
		return
	}
	floor := k.floor(wait)
	wait, ran = wait-floor, ran-floor
	if ran <= 0 {
		return
	}
	x := int64(float64(min(wait, ran)) / float64(ran) * shareOne)
	// Load and Store: a lost update moves the share by one primary's weight.
	v := k.waitShare.Load()
	k.waitShare.Store(v + (x-v)>>waitShift)
}

// floor takes a primary's wait into the key's floor, and returns the
// floor: the least wait seen, which rises by 1/2^floorShift of the gap
// with each primary that waited longer, so that it follows a round trip
// that grows.
func (k *adaptiveKey) floor(wait time.Duration) time.Duration {
	f := time.Duration(k.waitFloor.Load())
	if f == 0 || wait < f {
		f = wait
	} else {
		f += (wait - f) >> floorShift
	}
	// Load and Store: a lost update is one primary's.
	k.waitFloor.Store(int64(f))
	return min(f, wait)
}

const floorShift = 10

// queues reports whether the key's primaries spend a third or more of
// their time waiting for a worker: then a hedge against started work is
// refused (see call.holds).
func (k *adaptiveKey) queues() bool { return k.waitShare.Load() >= waitHigh }
