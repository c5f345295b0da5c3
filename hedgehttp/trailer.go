package hedgehttp

import (
	"io"
	"net/http"
)

// trailers sends the request trailers of a call whose request has a body
// as http.Transport sends a request's own: with the values the caller's
// Trailer holds once the body has ended, since a caller may fill them as
// its body is read (a checksum of what it streamed). Each attempt has a
// Trailer of its own, which takes the caller's values as its body ends,
// so that no two attempts share a map that one of them writes.
type trailers struct {
	from    http.Header // the caller's req.Trailer
	keys    http.Header // copied before the first attempt; read only
	getBody func() (io.ReadCloser, error)
}

// give gives r, an attempt's request with its body set, a Trailer of its
// own, a body that fills it as it ends, and a GetBody whose bodies do
// too, for a Base that sends the request again.
func (t *trailers) give(r *http.Request) {
	own := t.keys.Clone()
	r.Trailer = own
	r.Body = &trailerBody{ReadCloser: r.Body, from: t.from, to: own}
	if t.getBody != nil {
		r.GetBody = func() (io.ReadCloser, error) {
			b, err := t.getBody()
			if err != nil {
				return nil, err
			}
			return &trailerBody{ReadCloser: b, from: t.from, to: own}, nil
		}
	}
}

// trailerBody is an attempt's request body, which copies the caller's
// trailer values into the attempt's Trailer as it ends: on the goroutine
// that reads it, just before the Transport writes the trailers out.
type trailerBody struct {
	io.ReadCloser
	from, to http.Header
	ended    bool
}

func (b *trailerBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.ended {
		b.ended = true
		for k, v := range b.from {
			b.to[k] = v
		}
	}
	return n, err
}
