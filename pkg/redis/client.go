package redis

import (
	"context"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Client is the part of a go-redis client the Store uses. *goredis.Client,
// *goredis.ClusterClient and the UniversalClient that Open builds satisfy
// it. A *goredis.ClusterClient makes the Store group hits by Cluster slot
// and send each slot's script calls to its master's own client.
type Client interface {
	goredis.Scripter
	FCall(ctx context.Context, function string, keys []string, args ...any) *goredis.Cmd
	FunctionLoad(ctx context.Context, code string) *goredis.StringCmd
	Pipeline() goredis.Pipeliner
	Ping(ctx context.Context) *goredis.StatusCmd
	Close() error
}

// PingTimeout bounds Ping. It is no shorter than a decision's default
// CallTimeout, so a busy but healthy Redis does not make readiness flap.
const PingTimeout = time.Second
