package hedgegrpc_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgegrpc"
)

func TestNewValidates(t *testing.T) {
	good := hedgegrpc.HedgingPolicy{MaxAttempts: 2, NonFatalStatusCodes: unavailable}
	with := func(f func(*hedgegrpc.HedgingPolicy)) hedgegrpc.Config {
		p := good
		f(&p)
		return hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{"pkg.Svc/M": p}}
	}
	throttle := func(max int, ratio float64) hedgegrpc.Config {
		return hedgegrpc.Config{RetryThrottling: &hedgegrpc.RetryThrottling{MaxTokens: max, TokenRatio: ratio}}
	}
	names := func(names ...string) hedgegrpc.Config {
		cfg := hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{}}
		for _, n := range names {
			cfg.Methods[n] = good
		}
		return cfg
	}
	tests := []struct {
		name string
		cfg  hedgegrpc.Config
		want string // "" for valid; else a fragment of the error
	}{
		{"zero config", hedgegrpc.Config{}, ""},
		{"good policy", with(func(*hedgegrpc.HedgingPolicy) {}), ""},
		{"no non-fatal codes", with(func(p *hedgegrpc.HedgingPolicy) { p.NonFatalStatusCodes = nil }), ""},
		{"maxAttempts above the limit", with(func(p *hedgegrpc.HedgingPolicy) { p.MaxAttempts = 100 }), ""},
		{"maxAttempts 1 switches hedging off", with(func(p *hedgegrpc.HedgingPolicy) { p.MaxAttempts = 1 }), ""},
		{"learned delay", with(func(p *hedgegrpc.HedgingPolicy) { p.Delay = &hedge.Percentile{Quantile: 0.9} }), ""},
		{"names of every kind", names("", "pkg.Svc", "pkg.Svc/M", "/pkg.Other/M"), ""},
		{"throttling at its bounds", throttle(1000, 0.001), ""},

		{"maxAttempts 0", with(func(p *hedgegrpc.HedgingPolicy) { p.MaxAttempts = 0 }), "HedgingPolicy.MaxAttempts 0 is below 1"},
		{"negative maxAttempts", with(func(p *hedgegrpc.HedgingPolicy) { p.MaxAttempts = -1 }), "HedgingPolicy.MaxAttempts -1 is below 1"},
		{"negative delay", with(func(p *hedgegrpc.HedgingPolicy) { p.HedgingDelay = -time.Millisecond }), "HedgingPolicy.HedgingDelay -1ms is negative"},
		{"OK is not a failure", with(func(p *hedgegrpc.HedgingPolicy) { p.NonFatalStatusCodes = []codes.Code{codes.OK} }), "HedgingPolicy.NonFatalStatusCodes holds OK"},
		{"unknown code", with(func(p *hedgegrpc.HedgingPolicy) { p.NonFatalStatusCodes = []codes.Code{17} }), "HedgingPolicy.NonFatalStatusCodes holds 17, which is not a gRPC status code"},
		{"bad learned delay", with(func(p *hedgegrpc.HedgingPolicy) { p.Delay = &hedge.Percentile{Quantile: 2} }), "Percentile.Quantile 2 is outside (0, 1) (HedgingPolicy.Delay)"},
		{"method without service", names("/M"), "leading slash"},
		{"empty method", names("pkg.Svc/"), "not service or service/method"},
		{"too many slashes", names("a/b/c"), "not service or service/method"},
		{"one name with and without a slash", names("/x/y", "x/y"), "named twice"},
		{"maxTokens 0", throttle(0, 0.1), "RetryThrottling.MaxTokens 0 is outside (0, 1000]"},
		{"RetryThrottling.MaxTokens 1001", throttle(1001, 0.1), "RetryThrottling.MaxTokens 1001"},
		{"tokenRatio 0", throttle(10, 0), "RetryThrottling.TokenRatio 0 is not above 0"},
		{"negative tokenRatio", throttle(10, -0.1), "RetryThrottling.TokenRatio -0.1"},
		{"NaN tokenRatio", throttle(10, math.NaN()), "RetryThrottling.TokenRatio NaN"},
		{"four decimals", throttle(10, 0.1234), "more than three decimals"},
		{"MaxAttemptsLimit 1", hedgegrpc.Config{MaxAttemptsLimit: 1}, "Config.MaxAttemptsLimit 1 is outside 2..10"},
		{"Config.MaxAttemptsLimit 11", hedgegrpc.Config{MaxAttemptsLimit: 11}, "Config.MaxAttemptsLimit 11"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, err := hedgegrpc.New(tt.cfg)
			checkErr(t, err, tt.want)
			if (in == nil) != (err != nil) {
				t.Errorf("New = %v, %v: want an Interceptor or an error", in, err)
			}
		})
	}
}

func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("err = %v, want nil", err)
	case want != "" && err == nil:
		t.Errorf("err = nil, want one containing %q", want)
	case want != "" && (!strings.Contains(err.Error(), want) || !errors.Is(err, hedgegrpc.ErrInvalidConfig)):
		t.Errorf("err = %v, want an ErrInvalidConfig containing %q", err, want)
	}
}

func TestParseServiceConfig(t *testing.T) {
	// A6's own example, with a default for every method beside it.
	const a6 = `{
	  "loadBalancingPolicy": "round_robin",
	  "methodConfig": [{
	    "name": [{"service": "pkg.Svc", "method": "Get"}, {"service": "pkg.Other"}],
	    "timeout": "1s",
	    "hedgingPolicy": {
	      "maxAttempts": 4,
	      "hedgingDelay": ".5s",
	      "nonFatalStatusCodes": ["UNAVAILABLE", "INTERNAL", "ABORTED"]
	    }
	  }, {
	    "name": [{}],
	    "hedgingPolicy": {"maxAttempts": 2, "nonFatalStatusCodes": [14]}
	  }, {
	    "name": [{"service": "pkg.Retried"}],
	    "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s",
	                    "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}
	  }],
	  "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}
	}`
	a6Policy := hedgegrpc.HedgingPolicy{
		MaxAttempts:         4,
		HedgingDelay:        500 * time.Millisecond,
		NonFatalStatusCodes: []codes.Code{codes.Unavailable, codes.Internal, codes.Aborted},
	}
	hedging := func(body string) string {
		return `{"methodConfig": [{"name": [{"service": "s"}], "hedgingPolicy": ` + body + `}]}`
	}
	delay := func(d string) string {
		return hedging(`{"maxAttempts": 2, "hedgingDelay": "` + d + `"}`)
	}
	tests := []struct {
		name    string
		js      string
		want    hedgegrpc.Config
		wantErr string
	}{{
		name: "A6's example",
		js:   a6,
		want: hedgegrpc.Config{
			Methods: map[string]hedgegrpc.HedgingPolicy{
				"pkg.Svc/Get": a6Policy,
				"pkg.Other":   a6Policy,
				"":            {MaxAttempts: 2, NonFatalStatusCodes: []codes.Code{codes.Unavailable}},
				"pkg.Retried": {MaxAttempts: 1}, // its own entry decides: grpc-go retries it
			},
			RetryThrottling: &hedgegrpc.RetryThrottling{MaxTokens: 10, TokenRatio: 0.1},
		},
	}, {
		name: "an empty config hedges nothing",
		js:   `{}`,
	}, {
		name: "maxAttempts above 5 is kept: New caps it",
		js:   hedging(`{"maxAttempts": 9}`),
		want: hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{"s": {MaxAttempts: 9}}},
	}, {
		name: "hedgingDelay 0s",
		js:   delay("0s"),
		want: hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{"s": {MaxAttempts: 2}}},
	}, {
		name: "hedgingDelay with nine decimals",
		js:   delay("1.000000001s"),
		want: hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{"s": {MaxAttempts: 2, HedgingDelay: time.Second + 1}}},
	}, {
		name: "an entry without names is skipped",
		js:   `{"methodConfig": [{"hedgingPolicy": {"maxAttempts": 2}}]}`,
	}, {
		name: "a method with a timeout only is not hedged under its hedged service",
		js: `{"methodConfig": [{"name": [{"service": "s"}], "hedgingPolicy": {"maxAttempts": 3}},
		  {"name": [{"service": "s", "method": "M"}], "timeout": "1.5s"}]}`,
		want: hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{"s": {MaxAttempts: 3}, "s/M": {MaxAttempts: 1}}},
	}, {
		name: "a negative timeout, which grpc-go ignores",
		js:   `{"methodConfig": [{"name": [{"service": "s"}], "timeout": "-1.5s", "hedgingPolicy": {"maxAttempts": 2}}]}`,
		want: hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{"s": {MaxAttempts: 2}}},
	}, {
		name: "a timeout of 10,000 years",
		js:   `{"methodConfig": [{"name": [{"service": "s"}], "timeout": "315576000000.999999999s", "hedgingPolicy": {"maxAttempts": 2}}]}`,
		want: hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{"s": {MaxAttempts: 2}}},
	}, {
		name: "retryPolicy null is no retryPolicy",
		js:   `{"methodConfig": [{"name": [{"service": "s"}], "retryPolicy": null, "hedgingPolicy": {"maxAttempts": 2}}]}`,
		want: hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{"s": {MaxAttempts: 2}}},
	},
		{name: "not JSON", js: `{`, wantErr: "service config"},
		{name: "retryPolicy and hedgingPolicy", js: `{"methodConfig": [{"name": [{"service": "s"}], "retryPolicy": {}, "hedgingPolicy": {"maxAttempts": 2}}]}`, wantErr: "both retryPolicy and hedgingPolicy"},
		{name: "no maxAttempts", js: hedging(`{}`), wantErr: "no maxAttempts"},
		{name: "maxAttempts 1", js: hedging(`{"maxAttempts": 1}`), wantErr: "maxAttempts 1 is below 2"},
		{name: "fractional maxAttempts", js: hedging(`{"maxAttempts": 2.5}`), wantErr: "2.5 is not an integer"},
		{name: "unknown code", js: hedging(`{"maxAttempts": 2, "nonFatalStatusCodes": ["SLOW"]}`), wantErr: "invalid code"},
		{name: "OK is not a failure", js: hedging(`{"maxAttempts": 2, "nonFatalStatusCodes": ["OK"]}`), wantErr: "HedgingPolicy.NonFatalStatusCodes holds OK"},
		{name: "method without service", js: `{"methodConfig": [{"name": [{"method": "M"}], "hedgingPolicy": {"maxAttempts": 2}}]}`, wantErr: "without a service"},
		{name: "name given twice", js: `{"methodConfig": [{"name": [{"service": "s"}, {"service": "s"}], "hedgingPolicy": {"maxAttempts": 2}}]}`, wantErr: `names "s" twice`},
		{name: "delay without s", js: delay("1"), wantErr: "ending in \"s\""},
		{name: "negative delay", js: delay("-1s"), wantErr: "negative"},
		{name: "delay in ms", js: delay("500ms"), wantErr: "not decimal seconds"},
		{name: "ten decimals", js: delay("0.0000000001s"), wantErr: "at most nine decimals"},
		{name: "bare s", js: delay("s"), wantErr: "not decimal seconds"},
		{name: "delay out of range", js: delay("9999999999s"), wantErr: "out of range"},
		{name: "timeout in ms", js: `{"methodConfig": [{"name": [{}], "timeout": "500ms"}]}`, wantErr: "methodConfig[0]: timeout: \"500ms\" is not decimal seconds"},
		{name: "timeout without s", js: `{"methodConfig": [{"name": [{}], "timeout": "1"}]}`, wantErr: "ending in \"s\""},
		{name: "timeout beyond 10,000 years", js: `{"methodConfig": [{"name": [{}], "timeout": "315576000001s"}]}`, wantErr: "out of range"},
		{name: "timeout not a string", js: `{"methodConfig": [{"name": [{}], "timeout": 1}]}`, wantErr: "service config"},
		{name: "retryPolicy with an unknown code", js: `{"methodConfig": [{"name": [{}], "retryPolicy": {"retryableStatusCodes": ["SLOW"]}}]}`, wantErr: "retryPolicy"},
		{name: "maxTokens 0", js: `{"retryThrottling": {"maxTokens": 0, "tokenRatio": 0.1}}`, wantErr: "maxTokens 0 is outside"},
		{name: "RetryThrottling.MaxTokens 1001", js: `{"retryThrottling": {"maxTokens": 1001, "tokenRatio": 0.1}}`, wantErr: "outside (0, 1000]"},
		{name: "fractional maxTokens", js: `{"retryThrottling": {"maxTokens": 7.5, "tokenRatio": 0.1}}`, wantErr: "whole number"},
		{name: "no tokenRatio", js: `{"retryThrottling": {"maxTokens": 10}}`, wantErr: "needs maxTokens and tokenRatio"},
		{name: "tokenRatio 0", js: `{"retryThrottling": {"maxTokens": 10, "tokenRatio": 0}}`, wantErr: "not above 0"},
		{name: "tokenRatio with four decimals", js: `{"retryThrottling": {"maxTokens": 10, "tokenRatio": 0.0005}}`, wantErr: "more than three decimals"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := hedgegrpc.ParseServiceConfig(tt.js)
			checkErr(t, err, tt.wantErr)
			if tt.wantErr == "" {
				tt.want.ServiceConfig = tt.js // the whole document, for grpc-go
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
			if err == nil {
				if _, err := hedgegrpc.New(got); err != nil {
					t.Errorf("New(ParseServiceConfig(...)) = %v", err)
				}
			}
		})
	}
}
