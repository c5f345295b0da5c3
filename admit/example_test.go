package admit_test

import (
	"context"
	"fmt"

	"github.com/tailcut/hedge/admit"
)

// A server that executes one request at once: a hedge that would have to
// wait is shed, and the primary runs once the slot is free.
func ExampleGate() {
	ctx := context.Background()
	gate := &admit.Gate{Limit: 1, HedgeWait: -1} // a hedge never waits
	first, err := gate.Enter(ctx, false)
	fmt.Println("primary:", err)
	_, err = gate.Enter(ctx, true)
	fmt.Println("hedge:", err)
	first.Leave()
	next, err := gate.Enter(ctx, true)
	fmt.Println("hedge, with the slot free:", err)
	next.Leave()
	// Output:
	// primary: <nil>
	// hedge: admit: hedge shed
	// hedge, with the slot free: <nil>
}
