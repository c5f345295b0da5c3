package hedgehttp

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/tailcut/hedge"
)

// refuseSend is a Base that records that it was asked to send.
type refuseSend struct{ sent bool }

func (b *refuseSend) RoundTrip(r *http.Request) (*http.Response, error) {
	b.sent = true
	return nil, context.Cause(r.Context())
}

// An attempt that a tie takes out of the race while it waits out a
// Retry-After is not sent once the wait is over, and counts in flight no
// more: its answer is a tied attempt's, which nothing takes in as one
// that counted, and a count left behind would keep a refusal from ending
// the call at once. The pushback has passed already, so the wait itself
// returns at once, whatever the request's context says.
func TestTiedWhileHeldBackCountsNothing(t *testing.T) {
	base := &refuseSend{}
	tr := &Transport{Base: base, Delay: hedge.Fixed(time.Hour)}
	tr.once.Do(tr.init)
	req, err := http.NewRequest(http.MethodGet, "http://example.com/", nil)
	if err != nil {
		t.Fatal(err)
	}
	c := newCall(tr, req)
	passed := time.Now().Add(-time.Second)
	c.resume.Store(&passed)

	hctx, cancelAttempt := context.WithCancel(context.Background())
	a := &c.primary
	if send, _ := c.start(a, hctx); !send {
		t.Fatal("start: the attempt is not sent")
	}
	// A tie, as tieHeard makes it once hedge.Started has cancelled a.
	cancelAttempt()
	c.mu.Lock()
	cancelReq := c.takeOut(a)
	c.mu.Unlock()
	cancelReq()

	if _, err := c.send(a, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("send: %v, want the tie's cancellation", err)
	}
	if base.sent {
		t.Error("Base was asked to send a tied attempt")
	}
	if lost, tied := c.answered(a); !lost || !tied {
		t.Errorf("answered: lost %v, tied %v; want both", lost, tied)
	}
	c.mu.Lock()
	live := c.live
	c.mu.Unlock()
	if live != 0 {
		t.Errorf("%d attempts in flight after the tied one answered, want 0", live)
	}
}
