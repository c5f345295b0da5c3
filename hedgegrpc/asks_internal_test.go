package hedgegrpc

import (
	"context"
	"testing"

	"google.golang.org/grpc/metadata"
)

// A call asks for the start signal with TieKey whatever its value, as an
// HTTP request does with hedgehttp.TieHeader.
func TestAsksStartWithAnyValue(t *testing.T) {
	for _, tt := range []struct {
		md   metadata.MD
		want bool
	}{
		{metadata.Pairs(TieKey, "1"), true},
		{metadata.Pairs(TieKey, "yes"), true},
		{metadata.Pairs(TieKey, ""), true},
		{metadata.Pairs("other", "1"), false},
		{nil, false},
	} {
		ctx := metadata.NewIncomingContext(context.Background(), tt.md)
		if got := asksStart(ctx); got != tt.want {
			t.Errorf("asksStart(%v) = %v, want %v", tt.md, got, tt.want)
		}
	}
}
