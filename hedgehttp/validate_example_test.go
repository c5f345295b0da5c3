package hedgehttp_test

import (
	"fmt"
	"log"
	"net/http"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
)

// Validate checks a Transport at startup, so that a bad route or budget
// stops the program before its first request. The error names the field;
// for a pattern of Routes, its index.
func ExampleTransport_Validate() {
	transports := []*hedgehttp.Transport{
		{Routes: []string{"GET /users/{id}"}, Budget: &hedge.RatioBudget{Ratio: 0.2}},
		{MaxRoutes: -1},
		{MaxAttempts: 20},
		{Budget: &hedge.TokenBucket{MaxTokens: 5000}},
	}
	for _, tr := range transports {
		fmt.Println(tr.Validate())
	}

	// In a program, stop at startup:
	tr := transports[0]
	if err := tr.Validate(); err != nil {
		log.Fatal(err)
	}
	_ = &http.Client{Transport: tr}
	// Output:
	// <nil>
	// hedge: invalid policy: Transport.MaxRoutes -1 is negative
	// hedge: invalid policy: Transport.MaxAttempts 20 is above hedge.MaxAttemptsLimit 10
	// hedge: invalid budget: TokenBucket.MaxTokens 5000 is outside (0, 1000] (Transport.Budget)
}
