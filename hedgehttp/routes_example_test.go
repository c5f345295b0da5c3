package hedgehttp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
)

// Route names the route of a hedged request inside the Transport's Delay,
// Budget and Observer, and in each attempt's request context: the Routes
// pattern the request matched, or its method and host. Here the export
// hedges after 10ms and the lookup after a second, and an Observer prints
// what each request did. The export's first attempt is stuck, so its
// hedge wins; the lookup answers at once and sends none.
func ExampleRoute() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/export/all" && r.Header.Get(hedgehttp.DefaultAttemptHeader) == "0" {
			<-r.Context().Done() // stuck until the hedge wins
			return
		}
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()

	tr := &hedgehttp.Transport{
		Routes: []string{"GET /users/{id}", "GET /export/"},
		Delay: hedge.DelayFunc(func(ctx context.Context, k int) time.Duration {
			if hedgehttp.Route(ctx) == "GET /export/" {
				return 10 * time.Millisecond
			}
			return time.Second
		}),
		AttemptHeader: hedgehttp.DefaultAttemptHeader,
		Observer: hedge.ObserverFunc(func(ctx context.Context, r hedge.Report) {
			fmt.Printf("%s: %d attempts, answered by attempt %d\n", hedgehttp.Route(ctx), r.Attempts, r.Winner)
		}),
	}
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	for _, path := range []string{"/users/1", "/export/all"} {
		resp, err := client.Get(srv.URL + path)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
	}
	// Output:
	// GET /users/{id}: 1 attempts, answered by attempt 0
	// GET /export/: 2 attempts, answered by attempt 1
}
