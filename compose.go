package hedge

import (
	"context"
	"fmt"
	"reflect"
)

// releaser is a Budget that can take back a grant whose attempt never
// started: see Budget.
type releaser interface {
	Release(ctx context.Context, k int)
}

// AllOf returns a Budget that grants an attempt only if every one of
// budgets grants it, so that one policy can bound hedges by a ratio, a
// concurrency cap and a breaker at once. Nil budgets are left out; AllOf
// with none left grants everything, as a nil Budget does.
//
// A nil pointer (or other nil) of a concrete type is a mistake, not a
// budget left out: it is what a constructor returns beside its error, and
// it would panic on the first call. AllOf panics on it at once, with a
// message that names its place and type, as http.Handle does for a nil
// handler: a program that composes its budgets at startup fails there.
//
// Allow(ctx, 0), the primary's, goes to every budget, and the answer is
// true. Allow(ctx, k ≥ 1) asks the budgets in order and stops at the
// first refusal; every budget that had granted the attempt then gets it
// back: Release if it has that method, otherwise Done(ctx, k, Canceled),
// which is what Do reports for an attempt it claimed but did not start.
// Put the budget that refuses most often first, so that the others are
// asked least. Done goes to every budget, each of which granted the
// attempt.
//
// Grants come back also when a budget panics or calls runtime.Goexit in
// Allow, and Done and Release reach every budget even when one of them
// panics. The result has a Release method itself, so compositions nest. It is
// safe for concurrent use if the budgets are, and costs their calls plus
// a few nanoseconds.
func AllOf(budgets ...Budget) Budget {
	a := &allOf{}
	for i, b := range budgets {
		if b == nil {
			continue
		}
		if typedNil(b) {
			panic(fmt.Sprintf("hedge: AllOf: budget %d is a nil %T (was a constructor's error dropped?)", i, b))
		}
		a.budgets = append(a.budgets, b)
		a.places = append(a.places, i)
	}
	return a
}

// typedNil reports whether b holds a nil of a concrete type.
func typedNil(b Budget) bool {
	switch v := reflect.ValueOf(b); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// allOf is AllOf's Budget: a pointer, so that a Policy holding it stays
// comparable with ==.
type allOf struct {
	budgets []Budget
	places  []int // each budget's place among AllOf's arguments, nils counted
}

func (a *allOf) Allow(ctx context.Context, k int) bool {
	if primary(k) {
		for _, b := range a.budgets {
			b.Allow(ctx, k)
		}
		return true
	}
	granted := 0
	defer func() {
		// Refused, or a budget panicked or called runtime.Goexit: the
		// attempt will not start.
		if granted < len(a.budgets) {
			release(ctx, a.budgets[:granted], k)
		}
	}()
	for _, b := range a.budgets {
		if !b.Allow(ctx, k) {
			return false
		}
		granted++
	}
	return true
}

func (a *allOf) Done(ctx context.Context, k int, o Outcome) { done(ctx, a.budgets, k, o) }

func (a *allOf) Release(ctx context.Context, k int) { release(ctx, a.budgets, k) }

// done reports to every budget in bs. Each call is deferred behind the
// previous one, so that a panic or runtime.Goexit in one budget's Done
// does not keep the others' permits out.
func done(ctx context.Context, bs []Budget, k int, o Outcome) {
	if len(bs) == 0 {
		return
	}
	defer done(ctx, bs[1:], k, o)
	bs[0].Done(ctx, k, o)
}

// release gives the grant of attempt k back to every budget in bs, as done
// reports to them.
func release(ctx context.Context, bs []Budget, k int) {
	if len(bs) == 0 {
		return
	}
	defer release(ctx, bs[1:], k)
	if r, ok := bs[0].(releaser); ok {
		r.Release(ctx, k)
	} else {
		bs[0].Done(ctx, k, Canceled)
	}
}

// check reports the first of the budgets whose fields are out of range,
// with its place among AllOf's arguments.
func (a *allOf) check() error {
	for i, b := range a.budgets {
		if err := checkBudget(b); err != nil {
			return fmt.Errorf("%w (AllOf's budget %d)", err, a.places[i])
		}
	}
	return nil
}
