package hedge_test

import (
	"fmt"
	"log"
	"time"

	"github.com/tailcut/hedge"
)

// Validate checks a Policy at startup, its budget's fields included, so
// that a mistake stops the program before its first call rather than
// failing every call. The error names the field.
func ExamplePolicy_Validate() {
	policies := []hedge.Policy[string]{
		hedge.Auto[string](),
		{MaxAttempts: 20},
		{Timeout: -time.Second},
		{Budget: hedge.AllOf(&hedge.RatioBudget{Ratio: 0.2}, &hedge.Breaker{Threshold: 1.5})},
	}
	for _, p := range policies {
		fmt.Println(p.Validate())
	}

	// In a program, stop at startup:
	if err := policies[0].Validate(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// <nil>
	// hedge: invalid policy: Policy.MaxAttempts 20 is above MaxAttemptsLimit 10
	// hedge: invalid policy: Policy.Timeout -1s is negative
	// hedge: invalid budget: Breaker.Threshold 1.5 is outside (0, 1] (AllOf's budget 1)
}
