package hedge

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
)

// milli is one attempt, or one token, in the thousandths the budgets count
// in. Integers keep sums exact: ten tokens less six failures plus five
// successes at 0.2 is 5 tokens, where float64 makes it 5.000000000000001.
const milli = 1000

// thousandthsDown returns x in thousandths, rounded down so that a budget
// never grants more than its parameters say. It still reads a decimal such
// as 1.001 as 1001, although 1.001*1000 is a hair below 1001 in float64:
// m/1000 is correctly rounded, so it only exceeds x when m really does.
// x must be finite, non-negative and small enough for an int64.
func thousandthsDown(x float64) int64 {
	m := math.Round(x * milli)
	if m/milli > x {
		m--
	}
	return int64(m)
}

// primary reports whether attempt k is a call's first, which every budget
// grants: Do ignores the answer, and a retry loop's first try is not a
// retry. A ratio budget counts the call there.
func primary(k int) bool { return k < 1 }

// checker is a Budget of this package whose fields can be out of range.
// check reads them on first use, as every method does, and returns the
// error they make, wrapping ErrInvalidBudget (ErrInvalidPolicy for an
// Adaptive), or nil. After the first use it is an atomic load: Do asks
// it on every call.
type checker interface {
	check() error
}

// checkBudget returns the error of b's fields, if it is a budget of this
// package: what Policy.Validate, Do and Tries report.
func checkBudget(b Budget) error {
	if c, ok := b.(checker); ok {
		return c.check()
	}
	return nil
}

// invalidBudget is a budget's error as a Policy reports it: errors.Is
// finds ErrInvalidPolicy as well as what the budget's error wraps, and
// the message is the budget's, which names the field.
type invalidBudget struct{ err error }

func (e invalidBudget) Error() string        { return e.err.Error() }
func (e invalidBudget) Unwrap() error        { return e.err }
func (e invalidBudget) Is(target error) bool { return target == ErrInvalidPolicy }

// settings holds what a budget reads from its fields on first use: the
// first method called makes S under the lock, and every later one loads
// it. Changing the fields after that changes nothing.
type settings[S any] struct {
	mu sync.Mutex
	p  atomic.Pointer[S]
}

// load returns the settings, making them with read on first use.
func (o *settings[S]) load(read func() *S) *S {
	if s := o.p.Load(); s != nil {
		return s
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if s := o.p.Load(); s != nil {
		return s
	}
	s := read()
	o.p.Store(s)
	return s
}

// fieldError returns an error wrapping ErrInvalidBudget for a budget's
// field out of range: "RatioBudget.Ratio -1 is outside [0, 1000]".
func fieldError(field string, format string, args ...any) error {
	return fmt.Errorf("%w: %s %s", ErrInvalidBudget, field, fmt.Sprintf(format, args...))
}

// Compile-time checks: every budget of this package reports its fields.
var (
	_ checker = (*RatioBudget)(nil)
	_ checker = (*TokenBucket)(nil)
	_ checker = (*InflightLimit)(nil)
	_ checker = (*Breaker)(nil)
	_ checker = (*WinRateBudget)(nil)
	_ checker = (*Adaptive)(nil)
	_ checker = (*allOf)(nil)
)

// check reports an Adaptive's bad settings, which it reads on first use.
func (a *Adaptive) check() error { return a.load().err }
