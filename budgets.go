package hedge

import (
	"errors"
	"math"
)

// ErrInvalidBudget is wrapped by the error a budget's constructor returns
// for parameters it cannot honour. Constructors are where budgets report
// errors: a budget they return never fails, panics or blocks later.
var ErrInvalidBudget = errors.New("hedge: invalid budget")

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
