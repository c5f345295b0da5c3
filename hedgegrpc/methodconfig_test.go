package hedgegrpc_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/resolver/manual"

	"github.com/tailcut/hedge/hedgegrpc"
)

// scEntry is one methodConfig entry of a test document: its names, a
// timeout that no other entry of the document has, so that grpc-go's
// choice of entry for a method shows in the method config grpc-go
// applies, and its policy: hedging with this many attempts, a
// retryPolicy (retry), or neither (0).
type scEntry struct {
	names   []string
	timeout string
	hedge   int
	retry   bool
}

func (e scEntry) json() string {
	policy := ""
	switch {
	case e.retry:
		policy = `, "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "1s",
		  "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}`
	case e.hedge > 0:
		policy = fmt.Sprintf(`, "hedgingPolicy": {"maxAttempts": %d, "hedgingDelay": "0.1s", "nonFatalStatusCodes": ["UNAVAILABLE"]}`, e.hedge)
	}
	return `{"name": [` + strings.Join(e.names, ", ") + `], "timeout": "` + e.timeout + `"` + policy + `}`
}

func scDoc(entries []scEntry) string {
	var js []string
	for _, e := range entries {
		js = append(js, e.json())
	}
	return `{"methodConfig": [` + strings.Join(js, ", ") + `]}`
}

const (
	nameCheck  = `{"service": "grpc.health.v1.Health", "method": "Check"}`
	nameWatch  = `{"service": "grpc.health.v1.Health", "method": "Watch"}`
	nameHealth = `{"service": "grpc.health.v1.Health"}`
	nameSvcNoM = `{"service": "grpc.health.v1.Health", "method": ""}`
	nameOther  = `{"service": "pkg.Other"}`
	nameAll    = `{}`
)

// scDocs are documents in which a method's most specific entry differs
// from the entries around it in whether it hedges.
var scDocs = []struct {
	name    string
	entries []scEntry
}{
	{"a method with a timeout only, under a hedged service", []scEntry{
		{names: []string{nameHealth}, timeout: "1.1s", hedge: 3},
		{names: []string{nameCheck}, timeout: "1.2s"}}},
	{"a retried method, under a hedged service", []scEntry{
		{names: []string{nameHealth}, timeout: "1.1s", hedge: 5},
		{names: []string{nameCheck}, timeout: "1.2s", retry: true}}},
	{"a retried method, under a hedged default", []scEntry{
		{names: []string{nameAll}, timeout: "1.1s", hedge: 2},
		{names: []string{nameCheck}, timeout: "1.2s", retry: true}}},
	{"a service with a timeout only, under a hedged default, one method hedged", []scEntry{
		{names: []string{nameAll}, timeout: "1.1s", hedge: 2},
		{names: []string{nameHealth}, timeout: "1.2s"},
		{names: []string{nameCheck}, timeout: "1.3s", hedge: 3}}},
	{"a hedged service, under a default with a timeout only", []scEntry{
		{names: []string{nameAll}, timeout: "1.1s"},
		{names: []string{nameHealth}, timeout: "1.2s", hedge: 4}}},
	{"a hedged method, its service named with an empty method", []scEntry{
		{names: []string{nameWatch}, timeout: "1.1s", hedge: 3},
		{names: []string{nameSvcNoM}, timeout: "1.2s"}}},
	{"another service hedged", []scEntry{
		{names: []string{nameOther}, timeout: "1.1s", hedge: 3},
		{names: []string{nameAll}, timeout: "1.2s"}}},
	{"a hedged method whose negative timeout grpc-go ignores", []scEntry{
		{names: []string{nameCheck}, timeout: "-1.1s", hedge: 2},
		{names: []string{nameAll}, timeout: "1.2s", hedge: 3}}},
	{"a retried service, one method hedged", []scEntry{
		{names: []string{nameHealth}, timeout: "1.1s", retry: true},
		{names: []string{nameWatch}, timeout: "1.2s", hedge: 2}}},
	{"a hedged method whose timeout of 0 fails every call at once", []scEntry{
		{names: []string{nameCheck, nameWatch}, timeout: "0s", hedge: 2},
		{names: []string{nameAll}, timeout: "1.2s", hedge: 3}}},
	{"one entry for two methods, the default hedged", []scEntry{
		{names: []string{nameCheck, nameWatch}, timeout: "1.1s"},
		{names: []string{nameAll}, timeout: "1.2s", hedge: 4}}},
}

// TestMethodConfigAgreesWithGRPC: for each document, and each method,
// grpc-go picks an entry, and the hedging follows that entry, whatever it
// holds: the method is hedged with its hedgingPolicy, or not at all, and
// its timeout bounds the whole call. Every attempt stalls, so a call ends
// at its deadline having sent every attempt its policy allows. grpc-go's
// choice is read from the channel, by the timeout it applies, which no
// two entries share. The document is the channel's default config, comes
// from the resolver (one channel, every document pushed in turn), or is
// given in Go, as the Methods that ParseServiceConfig reads from it,
// without the document: then grpc-go applies no timeout, and the
// caller's deadline ends the call.
func TestMethodConfigAgreesWithGRPC(t *testing.T) {
	const callerDeadline = 10 * time.Second
	// want is what a call should do under grpc-go's choice of entry, which
	// the timeout mc names.
	want := func(t *testing.T, entries []scEntry, timeout *time.Duration, bounded bool) outcome {
		t.Helper()
		if timeout == nil {
			t.Fatal("grpc-go applies no method config: every method has an entry")
		}
		for _, e := range entries {
			d, err := time.ParseDuration(e.timeout)
			if err != nil {
				t.Fatal(err)
			}
			if d != *timeout {
				continue
			}
			w := outcome{Code: codes.DeadlineExceeded, At: callerDeadline, Attempts: max(1, e.hedge)}
			switch {
			case bounded && d == 0:
				w.At, w.Attempts = 0, 0 // grpc-go fails the call before it sends it
			case bounded && d > 0:
				w.At = d
			}
			return w
		}
		t.Fatalf("no entry has grpc-go's timeout %v", *timeout)
		return outcome{}
	}
	for _, method := range []string{"Check", "Watch"} {
		t.Run(method, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newProbe(stalls)
				r := manual.NewBuilderWithScheme("hedgetest")
				resolved := newProbeEnv(t, p, hedgegrpc.Config{}, r)
				for i, doc := range scDocs {
					js := scDoc(doc.entries)
					cfg, err := hedgegrpc.ParseServiceConfig(js)
					if err != nil {
						t.Fatalf("%s: %v", doc.name, err)
					}
					full := "/grpc.health.v1.Health/" + method
					var got, wanted []outcome
					// run makes a call on e and expects what grpc-go's
					// choice on chooser implies.
					run := func(e, chooser *probeEnv, mode string, bounded bool) {
						ctx, cancel := context.WithTimeout(context.Background(), callerDeadline)
						defer cancel()
						start := time.Since(e.t0)
						o := e.call(ctx, method, fmt.Sprintf("%d %s", i, mode))
						o.At -= start
						got = append(got, o)
						wanted = append(wanted, want(t, doc.entries, chooser.conn.GetMethodConfig(full).Timeout, bounded))
					}
					byDefault := newProbeEnv(t, p, cfg, nil)
					run(byDefault, byDefault, "default", true)
					push(t, r, js)
					run(resolved, resolved, "resolver", true)
					run(newProbeEnv(t, p, hedgegrpc.Config{Methods: cfg.Methods}, nil), byDefault, "go", false)
					if diff := cmp.Diff(wanted, got); diff != "" {
						t.Errorf("%s: calls by default config, resolver's and Go's (-want +got)\n%s", doc.name, diff)
					}
				}
			})
		})
	}
}

// TestRetriedMethodIsNotHedged: a service hedged with five attempts, one
// of whose methods grpc-go retries five times, against a server that
// always fails: each call of the retried method makes grpc-go's five
// attempts, not five hedges of five retries each. The document is the
// default config or the resolver's; or Methods given in Go hedge the
// whole service while the document beside them only retries the method,
// which grpc-go will do whatever the Methods say.
func TestRetriedMethodIsNotHedged(t *testing.T) {
	const retry = `"retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.01s", "maxBackoff": "0.1s",
	  "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}`
	const doc = `{"methodConfig": [
	  {"name": [{"service": "grpc.health.v1.Health"}],
	   "hedgingPolicy": {"maxAttempts": 5, "hedgingDelay": "0.05s", "nonFatalStatusCodes": ["UNAVAILABLE"]}},
	  {"name": [{"service": "grpc.health.v1.Health", "method": "Check"}], ` + retry + `}]}`
	byDefault, err := hedgegrpc.ParseServiceConfig(doc)
	if err != nil {
		t.Fatal(err)
	}
	inGo := hedgegrpc.Config{
		Methods: map[string]hedgegrpc.HedgingPolicy{"grpc.health.v1.Health": {
			MaxAttempts: 5, HedgingDelay: 50 * ms, NonFatalStatusCodes: unavailable}},
		ServiceConfig: `{"methodConfig": [{"name": [{"service": "grpc.health.v1.Health", "method": "Check"}], ` + retry + `}]}`,
	}
	for _, tt := range []struct {
		name     string
		cfg      hedgegrpc.Config
		resolved bool
	}{
		{"default config", byDefault, false},
		{"Methods in Go", inGo, false},
		{"resolver's config", hedgegrpc.Config{}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var r *manual.Resolver
				if tt.resolved {
					r = manual.NewBuilderWithScheme("hedgetest")
				}
				e := newProbeEnv(t, newProbe(probeFails(0, codes.Unavailable)), tt.cfg, r)
				if r != nil {
					push(t, r, doc)
				}
				var got []int
				for i := range 3 {
					o := e.call(context.Background(), "Check", fmt.Sprint(i))
					if o.Code != codes.Unavailable {
						t.Fatalf("call %d: %v, want Unavailable", i, o.Code)
					}
					got = append(got, o.Attempts)
				}
				if diff := cmp.Diff([]int{5, 5, 5}, got); diff != "" {
					t.Errorf("attempts per call on the server (-want +got)\n%s", diff)
				}
			})
		})
	}
}
