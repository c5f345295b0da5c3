package hedgegrpc_test

import (
	"context"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/tailcut/hedge/hedgegrpc"
)

// script is what the server does for one attempt of a streaming call.
// It returns the attempt's status; h records what the attempt received.
type script func(h *side) error

// seen is what the server saw of one attempt of a streaming call. Times
// are since the server started: exact virtual times in a synctest bubble.
type seen struct {
	Attempt  int
	Received []string // the bodies of the messages it received, in order
	Start    time.Duration
	End      time.Duration
	Canceled bool // the handler ended with its context cancelled
}

// streamServer is grpc-go's TestService, whose streaming methods follow
// a script per call (named by the "x-call" metadata) and per attempt
// (grpc-previous-rpc-attempts). Every message it sends carries a body,
// and its header and trailer name the attempt, so that a client can tell
// whose answer it got.
type streamServer struct {
	testpb.UnimplementedTestServiceServer
	t0      time.Time
	scripts map[string][]script

	mu      sync.Mutex
	log     map[string][]seen        // by call, in the order attempts ended
	changed chan struct{}            // closed and replaced when an attempt ends
	marks   map[string]chan struct{} // closed when what the key names happened
}

func newStreamServer(scripts map[string][]script) *streamServer {
	return &streamServer{t0: time.Now(), scripts: scripts, log: map[string][]seen{},
		changed: make(chan struct{}), marks: map[string]chan struct{}{}}
}

// mark returns the channel closed when what key names has happened:
// "call/k started", "call/k ended", "call/k got body".
func (s *streamServer) mark(key string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.marks[key]
	if !ok {
		c = make(chan struct{})
		s.marks[key] = c
	}
	return c
}

func (s *streamServer) happened(key string) {
	c := s.mark(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-c:
	default:
		close(c)
	}
}

// side is the server's side of one attempt, as a script sees it.
type side struct {
	s          *streamServer
	ss         grpc.ServerStream
	call       string
	k          int
	recv       func() (string, error) // the method's next message body
	send       func(string) error     // sends a reply with this body
	got        []string
	headerSent bool
}

// key names an event of attempt k of h's call.
func (h *side) key(k int, what string) string { return h.call + "/" + strconv.Itoa(k) + " " + what }

// Recv receives the next message and records it.
func (h *side) Recv() (string, error) {
	body, err := h.recv()
	if err != nil {
		return "", err
	}
	h.s.mu.Lock()
	h.got = append(h.got, body)
	h.s.mu.Unlock()
	h.s.happened(h.key(h.k, "got "+body))
	return body, nil
}

// RecvN receives n messages.
func (h *side) RecvN(n int) error {
	for range n {
		if _, err := h.Recv(); err != nil {
			return err
		}
	}
	return nil
}

// RecvAll receives until the client closes its side.
func (h *side) RecvAll() error {
	for {
		if _, err := h.Recv(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// Header sends the header, which names the attempt, before any message.
// A script that sends no header and no message ends its attempt with a
// trailers-only response, as A6 asks of servers: a header set but not
// sent would go out before the trailer, and commit the call.
func (h *side) Header() error {
	h.headerSent = true
	return h.ss.SendHeader(metadata.Pairs("attempt", strconv.Itoa(h.k)))
}

// Send sends a reply with body, after the header if it has not gone yet.
func (h *side) Send(body string) error {
	if !h.headerSent {
		if err := h.Header(); err != nil {
			return err
		}
	}
	return h.send(body)
}

// Await waits until every event named happened to attempts of this
// call, or the attempt is cancelled.
func (h *side) Await(events ...string) error {
	for _, e := range events {
		select {
		case <-h.s.mark(h.call + "/" + e):
		case <-h.ss.Context().Done():
			return h.ss.Context().Err()
		}
	}
	return nil
}

// Sleep waits for d, or until the attempt is cancelled.
func (h *side) Sleep(d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-h.ss.Context().Done():
		return h.ss.Context().Err()
	}
}

// Hang waits until the attempt is cancelled.
func (h *side) Hang() error {
	<-h.ss.Context().Done()
	return h.ss.Context().Err()
}

// Fail returns a status with code, and pushback in the trailer if set.
func (h *side) Fail(c codes.Code, pushback string) error {
	if pushback != "" {
		h.ss.SetTrailer(metadata.Pairs("grpc-retry-pushback-ms", pushback))
	}
	return status.Errorf(c, "%s attempt %d", h.call, h.k)
}

// run runs the script of ss's call and attempt, and records what it saw.
func (s *streamServer) run(ss grpc.ServerStream, request string, recv func() (string, error), send func(string) error) error {
	ctx := ss.Context()
	md, _ := metadata.FromIncomingContext(ctx)
	h := &side{s: s, ss: ss, recv: recv, send: send}
	if v := md.Get("x-call"); len(v) > 0 {
		h.call = v[0]
	}
	if v := md.Get("grpc-previous-rpc-attempts"); len(v) > 0 {
		h.k, _ = strconv.Atoi(v[0])
	}
	e := seen{Attempt: h.k, Start: time.Since(s.t0)}
	ss.SetTrailer(metadata.Pairs("attempt", strconv.Itoa(h.k)))
	s.happened(h.key(h.k, "started"))
	if request != "" {
		h.Recv() // the request of a server-streaming call, which grpc-go has read already
	}
	var err error
	if scripts := s.scripts[h.call]; h.k < len(scripts) {
		err = scripts[h.k](h)
	} else {
		err = status.Errorf(codes.Internal, "no script for %s attempt %d", h.call, h.k)
	}
	if ctx.Err() != nil {
		e.Canceled = true
		err = status.FromContextError(ctx.Err()).Err()
	}
	e.End = time.Since(s.t0)
	s.mu.Lock()
	e.Received = slices.Clone(h.got)
	s.log[h.call] = append(s.log[h.call], e)
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	s.happened(h.key(h.k, "ended"))
	return err
}

func payload(body string) *testpb.Payload { return &testpb.Payload{Body: []byte(body)} }

func (s *streamServer) FullDuplexCall(ss testpb.TestService_FullDuplexCallServer) error {
	return s.run(ss, "", func() (string, error) {
		m, err := ss.Recv()
		return string(m.GetPayload().GetBody()), err
	}, func(body string) error {
		return ss.Send(&testpb.StreamingOutputCallResponse{Payload: payload(body)})
	})
}

func (s *streamServer) StreamingInputCall(ss testpb.TestService_StreamingInputCallServer) error {
	var total int32
	return s.run(ss, "", func() (string, error) {
		m, err := ss.Recv()
		total += int32(len(m.GetPayload().GetBody()))
		return string(m.GetPayload().GetBody()), err
	}, func(string) error {
		return ss.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: total})
	})
}

// StreamingOutputCall records its one request as received before the
// script runs.
func (s *streamServer) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, ss testpb.TestService_StreamingOutputCallServer) error {
	first := true
	return s.run(ss, string(req.GetPayload().GetBody()), func() (string, error) {
		if !first {
			return "", io.EOF
		}
		first = false
		return string(req.GetPayload().GetBody()), nil
	}, func(body string) error {
		return ss.Send(&testpb.StreamingOutputCallResponse{Payload: payload(body)})
	})
}

// await waits until n attempts of call have ended and returns them by
// attempt. For tests over real connections, where no bubble says when
// everything is done; the timeout only keeps a broken test from hanging.
func (s *streamServer) await(t *testing.T, call string, n int) []seen {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		s.mu.Lock()
		got, changed := len(s.log[call]), s.changed
		s.mu.Unlock()
		if got >= n {
			return s.seen(call)
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("the server saw %d attempts of %s end, want %d", got, call, n)
		}
	}
}

// seen returns what the server saw of call's attempts so far, by attempt.
func (s *streamServer) seen(call string) []seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := slices.Clone(s.log[call])
	slices.SortFunc(l, func(a, b seen) int { return a.Attempt - b.Attempt })
	return l
}

// streamEnv is a TestService server and a client channel hedged by one
// Interceptor.
type streamEnv struct {
	srv    *streamServer
	client testpb.TestServiceClient
	conn   *grpc.ClientConn
}

// newStreamEnv serves scripts on a TCP listener on 127.0.0.1, or over
// bufconn for a synctest bubble, and dials it with cfg's interceptors,
// installed as DialOptions installs them, and dial.
func newStreamEnv(t *testing.T, cfg hedgegrpc.Config, scripts map[string][]script, tcp bool, dial ...grpc.DialOption) *streamEnv {
	t.Helper()
	in, err := hedgegrpc.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var lis net.Listener
	target := "passthrough:///bufconn"
	if tcp {
		if lis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		target = lis.Addr().String()
	} else {
		bl := bufconn.Listen(1 << 16)
		lis = bl
		dial = append(dial, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return bl.DialContext(ctx) }))
	}
	srv := newStreamServer(scripts)
	gs := grpc.NewServer()
	testpb.RegisterTestServiceServer(gs, srv)
	served := make(chan struct{})
	go func() {
		defer close(served)
		gs.Serve(lis)
	}()
	opts := append(in.DialOptions(target), grpc.WithTransportCredentials(insecure.NewCredentials()))
	conn, err := grpc.NewClient(target, append(opts, dial...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		gs.Stop()
		<-served
	})
	return &streamEnv{srv: srv, client: testpb.NewTestServiceClient(conn), conn: conn}
}

// callCtx names the call for the server's scripts.
func callCtx(ctx context.Context, call string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "x-call", call)
}

func duplex(body string) *testpb.StreamingOutputCallRequest {
	return &testpb.StreamingOutputCallRequest{Payload: payload(body)}
}

func input(body string) *testpb.StreamingInputCallRequest {
	return &testpb.StreamingInputCallRequest{Payload: payload(body)}
}
