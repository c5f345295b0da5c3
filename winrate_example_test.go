package hedge_test

import (
	"fmt"

	"github.com/tailcut/hedge"
)

// A win-rate budget per route. The report's slow requests are slow on
// every replica, so its hedges lose: after its Burst of 5 is spent, it
// gets a probe hedge per hundred calls, while the lookup's hedges go on.
// When a probe hedge wins, the report's credit is full again.
func ExampleWinRateBudget() {
	budget := &hedge.WinRateBudget{
		Key:   routeOf,
		Burst: 5, // 20 by default
	}
	report := onRoute("GET /report") // a call's context, as Do hands it to the budget
	lookup := onRoute("GET /users/{id}")

	// Do asks for every call (Allow 0), for every hedge (Allow 1), and
	// reports every hedge's outcome: here, each one lost the race.
	granted := 0
	for range 100 {
		budget.Allow(report, 0)
		if budget.Allow(report, 1) {
			granted++
			budget.Done(report, 1, hedge.Canceled)
		}
	}
	fmt.Println("report: hedges granted to 100 calls:", granted, "credit left:", budget.Credit(report))
	fmt.Println("lookup hedge:", budget.Allow(lookup, 1))

	budget.Allow(report, 0) // the 101st call brings the credit to 1
	fmt.Println("report: a probe hedge:", budget.Allow(report, 1), "credit left:", budget.Credit(report))
	budget.Done(report, 1, hedge.Accept) // it won
	fmt.Println("report: credit after the win:", budget.Credit(report))
	// Output:
	// report: hedges granted to 100 calls: 5 credit left: 0.99
	// lookup hedge: true
	// report: a probe hedge: true credit left: 0
	// report: credit after the win: 5
}
