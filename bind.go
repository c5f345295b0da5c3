package hedge

import "context"

// An Adaptive keeps its state per key of the caller's context. Do looks
// the key up once, with bind, and asks the key's state, which is a Delay,
// a Learner and a Budget, for the rest of the call. Only an *Adaptive
// itself is bound: a type of the user's that embeds one has the
// Adaptive's unexported methods too, but its own hooks are the ones Do
// must call, and they find the key themselves through the Adaptive's.

// binds reports whether hook, a Delay or a Budget, keeps its state per
// key.
func binds(hook any) bool {
	_, ok := hook.(*Adaptive)
	return ok
}

// bind puts the state of ctx's key in place of a Delay or Budget that
// keeps one per key, looking the key up once when both are the same. It
// returns an error wrapping ErrInvalidPolicy for bad settings, which Do
// returns.
func (c *call[T]) bind(ctx context.Context) (err error) {
	d, _ := c.delay.(*Adaptive)
	b, _ := c.budget.(*Adaptive)
	var k *adaptiveKey
	if d != nil {
		if k, err = d.bind(ctx); err != nil {
			return err
		}
		c.delay = k
	}
	if b != nil {
		if b != d {
			if k, err = b.bind(ctx); err != nil {
				return err
			}
		}
		c.budget = k
	}
	return nil
}
