package hedgehttp

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// body is the body of an attempt's response. Closing it closes the
// response once, however often it is called, and then releases the
// attempt's context: its link to the request's context is what lets the
// caller cancel a body it is still reading, and what must not outlive it.
// The body's end releases it too, as http.Transport releases its own
// there: a caller that reads to the end and never closes, under a
// context as long-lived as the process, must not keep the call.
type body struct {
	rc     io.ReadCloser
	cancel context.CancelFunc
	closed atomic.Bool
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil {
		// io.EOF or a failure: either way nothing more comes that the
		// caller could cancel. An HTTP/1 connection is back in its pool
		// before its body reports io.EOF, so this cuts nothing short.
		b.cancel()
	}
	return n, err
}

func (b *body) Close() error {
	if !b.closed.CompareAndSwap(false, true) {
		return nil
	}
	err := b.rc.Close() // first: an HTTP/1 connection read to EOF goes back to the pool
	b.cancel()
	return err
}

// An HTTP/1 response nobody will read is drained before it is closed, so
// that its keep-alive connection can carry the next request, but only so
// far: past drainLimit bytes or drainWait, a new connection is cheaper
// than the wait, and a loser that stalls must not hold its goroutine.
// HTTP/2 multiplexes: closing a stream early costs its connection nothing.
const (
	drainLimit = 64 << 10
	drainWait  = 50 * time.Millisecond
)

// release drains and closes a response that hedge.Do did not return: a
// loser, or a retryable response superseded by a later attempt.
func release(resp *http.Response) {
	b, ok := resp.Body.(*body)
	if !ok {
		return // no body: the attempt released its context when it answered
	}
	if resp.ProtoMajor < 2 && resp.ContentLength <= drainLimit {
		t := time.AfterFunc(drainWait, b.cancel)
		io.CopyN(io.Discard, b.rc, drainLimit+1)
		t.Stop()
	}
	b.Close()
	// The body lives in its attempt, which the call keeps while the
	// caller holds the winner's response, and Base's body can reach its
	// response (an HTTP/2 stream keeps it): let both go. Nobody reads a
	// released body again.
	b.rc = http.NoBody
}
