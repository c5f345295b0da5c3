package hedgegrpc_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgegrpc"
)

// Range names each learned delay as the Observer keys the calls it
// schedules: a method's by its full name, a service's and the default's
// by theirs; fixed delays and names that do not hedge are left out.
func TestRangeKeys(t *testing.T) {
	get, svc, all := &hedge.Percentile{}, &hedge.Percentile{}, &hedge.Percentile{}
	cfg := hedgegrpc.Config{Methods: map[string]hedgegrpc.HedgingPolicy{
		"/pkg.Svc/Get": {MaxAttempts: 2, Delay: get},
		"pkg.Svc":      {MaxAttempts: 2, Delay: svc},
		"pkg.Svc/Put":  {MaxAttempts: 2, Delay: svc},
		"":             {MaxAttempts: 2, Delay: all},
		"pkg.Svc/List": {MaxAttempts: 2, HedgingDelay: time.Millisecond},
		"pkg.Svc/Del":  {MaxAttempts: 1, Delay: &hedge.Percentile{}},
	}}
	want := map[string]hedge.Delay{"": all, "/pkg.Svc/Get": get, "/pkg.Svc/Put": svc, "pkg.Svc": svc}
	in, err := hedgegrpc.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		name   string
		delays interface {
			Range(func(string, hedge.Delay) bool)
		}
	}{{"Config", cfg}, {"Interceptor", in}} {
		got := map[string]hedge.Delay{}
		var order []string
		r.delays.Range(func(key string, d hedge.Delay) bool {
			got[key] = d
			order = append(order, key)
			return true
		})
		if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b hedge.Delay) bool { return a == b })); diff != "" {
			t.Errorf("%s.Range (-want +got):\n%s", r.name, diff)
		}
		if diff := cmp.Diff([]string{"", "pkg.Svc", "/pkg.Svc/Get", "/pkg.Svc/Put"}, order); diff != "" {
			t.Errorf("%s.Range's order (-want +got):\n%s", r.name, diff)
		}
		n := 0
		r.delays.Range(func(string, hedge.Delay) bool { n++; return false })
		if n != 1 {
			t.Errorf("%s.Range went on for %d keys after f returned false", r.name, n-1)
		}
	}
	var zero hedgegrpc.Interceptor
	zero.Range(func(key string, _ hedge.Delay) bool {
		t.Errorf("the zero Interceptor's Range passed %q", key)
		return true
	})
}
