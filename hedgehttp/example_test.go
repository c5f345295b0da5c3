package hedgehttp_test

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"time"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
)

// The first replica is stuck; after 10ms the Transport sends a hedge,
// which answers, and the stuck request is cancelled.
func ExampleTransport() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := r.Header.Get("Hedge-Attempt")
		if k == "0" {
			<-r.Context().Done() // stuck until the hedge wins
			return
		}
		fmt.Fprint(w, "hello from attempt ", k)
	}))
	defer srv.Close()

	tr := &hedgehttp.Transport{
		Delay:         hedge.Fixed(10 * time.Millisecond), // the zero value learns it per route
		AttemptHeader: "Hedge-Attempt",
	}
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body) // readable after RoundTrip returned
	resp.Body.Close()
	fmt.Println(string(body))
	for _, s := range tr.Stats() {
		fmt.Println("requests:", s.Calls, "hedged:", s.Hedged, "won by the hedge:", s.Wins[1])
	}
	// Output:
	// hello from attempt 1
	// requests: 1 hedged: 1 won by the hedge: 1
}

// Routes give a slow export and a fast lookup on the same host a delay
// and stats each. Here each route learns its own p90.
func ExampleTransport_routes() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()

	tr := &hedgehttp.Transport{
		Routes: []string{"GET /users/{id}", "GET /export/"},
		Delay: &hedge.Keyed{
			Key: hedgehttp.Route,
			New: func(route string) hedge.Delay { return &hedge.Percentile{Quantile: 0.9} },
		},
	}
	client := &http.Client{Transport: tr}
	for _, path := range []string{"/users/1", "/users/2", "/export/all"} {
		resp, err := client.Get(srv.URL + path)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
	}
	stats := tr.Stats()
	for _, route := range slices.Sorted(maps.Keys(stats)) {
		fmt.Println(route, stats[route].Calls)
	}
	// Output:
	// GET /export/ 1
	// GET /users/{id} 2
}
