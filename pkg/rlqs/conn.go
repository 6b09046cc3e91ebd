package rlqs

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
)

// TagConnections returns the gRPC server option that tells client
// connections apart, so that a Service on that server bounds the quota
// streams open on each (Options.MaxStreamsPerConnection). It adds a stats
// handler that only tags each connection's context; other stats handlers
// (tracing) still run. A peer address would not do: every client of a unix
// socket has the same.
func TagConnections() grpc.ServerOption { return grpc.StatsHandler(connTagger{}) }

// connection counts the quota streams open on one client connection.
type connection struct{ streams atomic.Int64 }

// release gives back one stream of c; nil has none.
func (c *connection) release() {
	if c != nil {
		c.streams.Add(-1)
	}
}

type connKey struct{}

// connectionOf is the connection ctx's stream is open on, nil on a server
// without TagConnections.
func connectionOf(ctx context.Context) *connection {
	c, _ := ctx.Value(connKey{}).(*connection)
	return c
}

// connTagger gives each connection's context a connection of its own.
type connTagger struct{}

func (connTagger) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return context.WithValue(ctx, connKey{}, &connection{})
}

func (connTagger) HandleConn(context.Context, stats.ConnStats) {}

func (connTagger) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (connTagger) HandleRPC(context.Context, stats.RPCStats) {}
