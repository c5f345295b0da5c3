// Package snippet is what the Go snippets of the project's Markdown leave
// to the reader: the service's own types, a client, a context. The snippet
// test checks each snippet that is not a whole file in a package of its
// own with this file beside it.
package snippet

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgegrpc"
)

// Profile is what the upstream returns; T is any result type.
type (
	Profile struct{ Name string }
	T       = Profile
)

// ProfileClient calls one replica of the upstream.
type ProfileClient struct{}

func (*ProfileClient) Profile(ctx context.Context, replica, id string) (Profile, error) {
	return Profile{}, ctx.Err()
}

var (
	ctx      = context.Background()
	client   = &ProfileClient{}
	replicas = []string{"10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080"}
	id       = "42"

	mux = http.NewServeMux() // the server's handler

	target  = "dns:///profiles.internal:443" // a gRPC target
	creds   = grpc.WithTransportCredentials(insecure.NewCredentials())
	methods = map[string]hedgegrpc.HedgingPolicy{}

	mp       = metric.NewMeterProvider()
	provider = mp
	keyed    = &hedge.Keyed{}
)
