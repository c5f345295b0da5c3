package hedgehttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"time"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/admit"
	"github.com/tailcut/hedge/hedgehttp"
)

// twoReplicas sends a call's primary to one replica and its hedges to
// the other, as a load balancer would.
type twoReplicas struct{ primary, hedges *url.URL }

func (rs twoReplicas) RoundTrip(r *http.Request) (*http.Response, error) {
	to := rs.primary
	if hedge.Attempt(r.Context()) > 0 {
		to = rs.hedges
	}
	r = r.Clone(r.Context())
	r.URL.Scheme, r.URL.Host = to.Scheme, to.Host
	return http.DefaultTransport.RoundTrip(r)
}

// Two replicas, each serving one request at a time behind an Admission.
// The first is busy with a long report, and a call's primary waits in
// its queue. The call's hedge starts at once at the second replica,
// whose start signal cancels the primary where it waits: it leaves the
// queue without running, and the busy replica does no work for the call.
func ExampleAdmission() {
	reporting, reportDone := make(chan struct{}), make(chan struct{})
	primaryIn, primaryLeft := make(chan struct{}), make(chan struct{})

	busy := &hedgehttp.Admission{
		Gate: &admit.Gate{Limit: 1},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/report" {
				close(reporting)
				<-reportDone
				return
			}
			fmt.Fprint(w, "from the busy replica")
		}),
	}
	first := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/report" {
			busy.ServeHTTP(w, r)
			return
		}
		close(primaryIn)
		busy.ServeHTTP(w, r)
		if r.Context().Err() != nil {
			fmt.Println("the primary left the busy replica's queue")
			close(primaryLeft)
		}
	}))
	defer first.Close()
	idle := &hedgehttp.Admission{
		Gate: &admit.Gate{Limit: 1},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-primaryLeft // for the example's sake: the tie comes first
			fmt.Fprint(w, "from the idle replica")
		}),
	}
	second := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-primaryIn // for the example's sake: the primary waits already
		idle.ServeHTTP(w, r)
	}))
	defer second.Close()

	go func() {
		resp, err := http.Get(first.URL + "/report")
		if err == nil {
			resp.Body.Close()
		}
	}()
	<-reporting
	defer close(reportDone)

	primary, _ := url.Parse(first.URL)
	hedges, _ := url.Parse(second.URL)
	tr := &hedgehttp.Transport{
		Base:  twoReplicas{primary, hedges},
		Delay: hedge.Fixed(time.Millisecond),
		Observer: hedge.ObserverFunc(func(_ context.Context, r hedge.Report) {
			fmt.Println("attempts tied:", r.Tied)
		}),
	}
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	resp, err := client.Get(first.URL + "/profile")
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.Status, string(body))
	// Output:
	// the primary left the busy replica's queue
	// attempts tied: 1
	// 200 OK from the idle replica
}
