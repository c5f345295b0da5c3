// Package pipenet is a net.Listener whose connections are in-memory pipes
// (net.Pipe), for tests and benchmarks: a real http.Server and
// http.Transport talk through it without the kernel, and inside a
// synctest bubble, in virtual time.
package pipenet

import (
	"context"
	"net"
	"net/http"
	"sync"
	"testing"
)

// Listener hands each connection that Dial makes to Accept. Make one with
// Listen; it is safe for concurrent use.
type Listener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

// Listen returns a Listener that no connection has reached yet.
func Listen() *Listener {
	return &Listener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

// Accept waits for the next connection Dial makes, or for Close.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close makes Accept and Dial return net.ErrClosed; the connections made
// stay open. Closing twice is harmless.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

// Addr is the same for every Listener.
func (l *Listener) Addr() net.Addr { return addr{} }

// Dial connects to the Listener, whatever network and address it is
// given, as an http.Transport's DialContext: it waits for Accept, for
// Close or for ctx.
func (l *Listener) Dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.closed:
		client.Close()
		server.Close()
		return nil, net.ErrClosed
	case <-ctx.Done():
		client.Close()
		server.Close()
		return nil, ctx.Err()
	}
}

type addr struct{}

func (addr) Network() string { return "pipe" }
func (addr) String() string  { return "pipe" }

// Serve serves srv on a new Listener on a goroutine of its own, and
// returns the Listener, whose Dial reaches srv. When tb ends, srv is
// closed and Serve waits for its goroutine: register the cleanup of a
// Transport that dials it after calling Serve, so that it runs first.
func Serve(tb testing.TB, srv *http.Server) *Listener {
	l := Listen()
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(l)
	}()
	tb.Cleanup(func() {
		srv.Close()
		<-served
	})
	return l
}
