package hedge

import "time"

// What a call tells an Adaptive of its ties (see adaptive_tie.go): how
// long its primary waited for a worker, and whether a hedge would race
// work that has started.

// holds reports whether the call's Adaptive (see tieKey) refuses the
// timed hedge due now: while its key queues, a hedge due while an attempt
// of the call in flight has reported its start would race running work,
// at the cost of a worker that queued calls wait for. The budget is not
// asked. due decides it under c.mu, with the rest of what is due: an
// attempt owed to a retryable result is never refused so, also one owed
// while another goroutine claims, which a refusal decided outside c.mu
// would drop with it. Called with c.mu held.
func (c *call[T]) holds() bool {
	key := c.tieKey()
	return key != nil && key.queues() && c.runningLocked()
}

// runningLocked reports whether an attempt in flight has reported its
// start: one that has not answered, and that neither the call nor a tie
// cancelled. Called with c.mu held.
func (c *call[T]) runningLocked() bool {
	for a := &c.primary; a != nil; a = a.next {
		if a.began && !c.isKept(a) && !a.canceled() {
			return true
		}
	}
	return false
}

// learnWait tells the call's Adaptive (see tieKey) how long of ran the
// primary waited before it reported its start (began), if it did and
// answered.
func (c *call[T]) learnWait(began, ran time.Duration, complete bool) {
	if key := c.tieKey(); key != nil && began > 0 && complete {
		key.waited(began, ran)
	}
}

// tieKey returns the key of the Adaptive whose calls' ties the call
// learns from and is held back by: its Delay's, else its Budget's. The
// two must be one key: a transport that wraps one role in a hook of its
// own (hedgehttp's Delay adds pushback, hedgegrpc's Budget the token
// bucket) leaves the Adaptive in the other, and a call that taught one
// key and asked another would never hold a hedge back. Nil: neither is
// an Adaptive.
func (c *call[T]) tieKey() *adaptiveKey {
	if key, ok := c.delay.(*adaptiveKey); ok {
		return key
	}
	key, _ := c.budget.(*adaptiveKey)
	return key
}
