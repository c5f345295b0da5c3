package hedgehttp_test

import (
	"cmp"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
)

// A server that can serve one request at a time is busy with a primary
// when that call's hedge arrives: the Shedder answers the hedge with a
// 503 at once, and the Transport goes on waiting for the primary. Neither
// side needs more: a Transport marks its hedges with Hedge-Attempt, the
// header the Shedder reads, and sends its first attempts unmarked.
func ExampleShedder() {
	busy := make(chan struct{})      // the primary holds the one place
	hedgeShed := make(chan struct{}) // the hedge has had its answer
	shedder := &hedgehttp.Shedder{
		Limit: 1, // what the service can serve at once
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(busy)
			<-hedgeShed
			fmt.Fprint(w, "answered by attempt ", cmp.Or(r.Header.Get(hedgehttp.DefaultAttemptHeader), "0"))
		}),
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(hedgehttp.DefaultAttemptHeader) == "" { // the primary
			shedder.ServeHTTP(w, r)
			return
		}
		<-busy
		shedder.ServeHTTP(w, r)
		fmt.Println("the hedge:", w.Header().Get("Retry-After"), "as Retry-After")
		close(hedgeShed)
	}))
	defer srv.Close()

	tr := &hedgehttp.Transport{Delay: hedge.Fixed(10 * time.Millisecond)}
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.Status, string(body))
	fmt.Println("hedges shed:", shedder.Shed())
	// Output:
	// the hedge: 0 as Retry-After
	// 200 OK answered by attempt 0
	// hedges shed: 1
}
