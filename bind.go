package hedge

import "context"

// binder is a Delay or a Budget of this package that keeps its state per
// key of the caller's context: an Adaptive. Do looks the key up once, with
// bind, and asks the key's state, which is a Delay, a Learner and a
// Budget, for the rest of the call. bind returns an error wrapping
// ErrInvalidPolicy for bad settings, which Do returns.
type binder interface {
	bind(ctx context.Context) (*adaptiveKey, error)
}

// binds reports whether hook, a Delay or a Budget, keeps its state per
// key.
func binds(hook any) bool {
	_, ok := hook.(binder)
	return ok
}

// bind puts the state of ctx's key in place of a Delay or Budget that
// keeps one per key, looking the key up once when both are the same.
func (c *call[T]) bind(ctx context.Context) (err error) {
	d, _ := c.delay.(binder)
	b, _ := c.budget.(binder)
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
