package hedgegrpc_test

import (
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/admit"
	"github.com/tailcut/hedge/hedgegrpc"
)

// checkAllocs returns the allocations of one Check on a warm channel
// over bufconn, dialled with dial, to a server made with srv that
// answers at once, as callAllocs counts them.
func checkAllocs(t *testing.T, srv []grpc.ServerOption, dial ...grpc.DialOption) float64 {
	t.Helper()
	return serverCallAllocs(t, false, srv, dial...)
}

// TestTiedUnaryAllocs pins what a unary call that hedge.Do races, and
// whose attempts ask for the start signal, allocates beyond a plain
// call when its primary answers before the first hedge is due: 21
// objects against a server without Admission, of which 19 are what such
// a call costs untied (the race's goroutine, context and copies) and 2
// TieKey's in the attempt's metadata; and 33 against a server whose
// Admission sends the signal, beside a plain call through the same
// Admission, the server's allocations included: the attempt made as a
// stream, which hands over its headers before the answer, and the
// headers the server sends at the start.
func TestTiedUnaryAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("counts allocations of real gRPC calls")
	}
	in, err := hedgegrpc.New(hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{"grpc.health.v1.Health": {
		MaxAttempts: 2, Delay: hedge.Fixed(time.Hour), NonFatalStatusCodes: unavailable,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	adm := &hedgegrpc.Admission{Gate: &admit.Gate{Limit: 4}}
	admitted := []grpc.ServerOption{grpc.ChainUnaryInterceptor(adm.Unary)}
	plain := checkAllocs(t, nil)
	tied := checkAllocs(t, nil, in.DialOptions("passthrough:///bufconn")...)
	plainAdmitted := checkAllocs(t, admitted)
	tiedAdmitted := checkAllocs(t, admitted, in.DialOptions("passthrough:///bufconn")...)
	t.Logf("plain %v, tied %v; through an Admission: plain %v, tied %v", plain, tied, plainAdmitted, tiedAdmitted)
	if extra := tied - plain; extra > tiedExtra {
		t.Errorf("a tied call allocates %v more than a plain one (%v), want at most %v", extra, plain, tiedExtra)
	}
	if extra := tiedAdmitted - plainAdmitted; extra > tiedAdmittedExtra {
		t.Errorf("through an Admission, a tied call allocates %v more than a plain one (%v), want at most %v", extra, plainAdmitted, tiedAdmittedExtra)
	}
}

const tiedExtra, tiedAdmittedExtra = 21, 33
