package hedgegrpc_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tailcut/hedge/hedgegrpc"
)

// TestServiceConfigNamesAgreeWithGRPC checks that ParseServiceConfig
// accepts and refuses the names of a service config exactly as grpc-go
// does, whatever policy each entry has: a name belongs to one entry of the
// whole document, since A6 gives a method one policy, so a retry-only
// entry or one with no policy at all claims its names as a hedging entry
// does. Each document also goes to grpc-go's own parser, through
// grpc.WithDefaultServiceConfig, so that the expected verdict is
// grpc-go's and not only ours.
func TestServiceConfigNamesAgreeWithGRPC(t *testing.T) {
	const (
		retry   = `"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}`
		hedging = `"hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0.05s", "nonFatalStatusCodes": ["UNAVAILABLE"]}`
		timeout = `"timeout": "1s"`
	)
	entry := func(policy string, names ...string) string {
		return `{"name": [` + strings.Join(names, ", ") + `], ` + policy + `}`
	}
	doc := func(entries ...string) string {
		return `{"methodConfig": [` + strings.Join(entries, ", ") + `]}`
	}
	const (
		get     = `{"service": "pkg.Svc", "method": "Get"}`
		svc     = `{"service": "pkg.Svc"}`
		svcNoM  = `{"service": "pkg.Svc", "method": ""}`
		other   = `{"service": "pkg.Other"}`
		all     = `{}`
		allNoS  = `{"service": ""}`
		noSvc   = `{"method": "Get"}`
		retried = `{"service": "pkg.Retried"}`
	)
	tests := []struct {
		name    string
		js      string
		wantErr string // "" when grpc-go accepts the document too
	}{
		{"retry-only and hedging entries, each its own method", doc(entry(retry, retried), entry(hedging, get)), ""},
		{"a service in a retry-only entry, one of its methods hedged", doc(entry(retry, svc), entry(hedging, get)), ""},
		{"a hedged service, one of its methods retried", doc(entry(hedging, svc), entry(retry, get)), ""},
		{"every method retried, one service hedged", doc(entry(retry, all), entry(hedging, svc)), ""},
		{"an entry without a policy beside a hedged one", doc(entry(timeout, other), entry(hedging, get)), ""},

		{"a method retried, then hedged", doc(entry(retry, get), entry(hedging, get)), `names "pkg.Svc/Get", which methodConfig[0] named`},
		{"a method hedged, then retried", doc(entry(hedging, get), entry(retry, get)), `names "pkg.Svc/Get", which methodConfig[0] named`},
		{"a service retried, then hedged", doc(entry(retry, svc), entry(hedging, svc)), `names "pkg.Svc", which methodConfig[0] named`},
		{"a service hedged, then retried without a method", doc(entry(hedging, svc), entry(retry, svcNoM)), `names "pkg.Svc", which methodConfig[0] named`},
		{"every method retried, then hedged", doc(entry(retry, all), entry(hedging, allNoS)), `names "", which methodConfig[0] named`},
		{"a method with a timeout only, then hedged", doc(entry(timeout, get), entry(hedging, get)), `names "pkg.Svc/Get", which methodConfig[0] named`},
		{"a method hedged, then given a timeout only", doc(entry(hedging, other, get), entry(timeout, get)), `names "pkg.Svc/Get", which methodConfig[0] named`},
		{"two retry-only entries, one method", doc(entry(retry, get), entry(retry, get), entry(hedging, other)), `names "pkg.Svc/Get", which methodConfig[0] named`},
		{"one retry-only entry naming a method twice", doc(entry(retry, get, get)), `names "pkg.Svc/Get" twice`},
		{"a retry-only method without a service", doc(entry(retry, noSvc), entry(hedging, other)), "without a service"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if grpcErr := grpcParse(tt.js); (grpcErr != nil) != (tt.wantErr != "") {
				t.Fatalf("grpc-go's verdict: %v; the case expects an error: %v", grpcErr, tt.wantErr != "")
			}
			_, err := hedgegrpc.ParseServiceConfig(tt.js)
			checkErr(t, err, tt.wantErr)
		})
	}
}

// grpcParse returns the error grpc-go's own parser gives for js as a
// channel's default service config: grpc.NewClient parses it at once,
// without connecting.
func grpcParse(js string) error {
	conn, err := grpc.NewClient("passthrough:///unused",
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultServiceConfig(js))
	if err != nil {
		return err
	}
	return conn.Close()
}
