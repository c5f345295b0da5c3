package hedge

import "time"

// Range calls f with each key the Adaptive has seen and that key's
// state, a Delay whose Current method says what it hedges at now, until
// f returns false. The state shared by keys past MaxKeys (and by every
// call when Key is nil) comes last, under the key "". Range is what a
// metrics adapter reads a learned delay per key from (hedgeotel's
// WithDelays); it is safe to call concurrently with calls, and adds no
// key.
func (a *Adaptive) Range(f func(key string, d Delay) bool) {
	s := a.load()
	if s.err != nil {
		return
	}
	more := true
	s.keys.m.Range(func(key, st any) bool {
		more = f(key.(string), st.(*adaptiveKey))
		return more
	})
	if more && s.keys.overflow != nil {
		f("", s.keys.overflow)
	}
}

// Current returns the delay of the key's plan: -1 while it sends no
// hedge.
func (k *adaptiveKey) Current() time.Duration {
	if p := k.plan.plan.Load(); p.Hedges > 0 {
		return p.Delay
	}
	return -1
}
