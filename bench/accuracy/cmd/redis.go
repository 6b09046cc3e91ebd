package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/bench/accuracy"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/redis"
)

// redisCost replays requests of one limit through the Redis store for every
// variant, on a simulated clock, and prints the script's CPU per decision
// (INFO commandstats: fcall usec per call, or evalsha's where FUNCTION is
// refused, which is Redis's own time for the script) and the memory of a counter (MEMORY USAGE, averaged over the
// keys the replay left).
func redisCost(w io.Writer, addr string, l limiter.Limit, vs []accuracy.Variant, keys, perKey int) error {
	ctx := context.Background()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	fmt.Fprintf(w, "\nRedis cost of limit %d per %v: %d counters, %d decisions each at 1.5x the limit's rate (redis %s)\n\n",
		l.Requests, l.Window, keys, perKey, addr)
	fmt.Fprintf(w, "| algorithm | Redis CPU per decision (us) | MEMORY USAGE per key (bytes) |\n| --- | ---: | ---: |\n")
	for _, v := range vs {
		var now int64 = 1_767_225_600_000
		s := redis.New(c, redis.Options{Prefix: "acc:" + strings.ReplaceAll(v.Name, " ", "") + ":", CallTimeout: time.Second,
			LeaseRate: redis.DefaultLeaseRate, Now: func() time.Time { return time.UnixMilli(now) }})
		lv := v.Of(l)
		step := l.Window.Milliseconds() / int64(l.Requests) * 2 / 3 / int64(keys)
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			return err
		}
		for i := range perKey * keys {
			hit := limiter.Hit{Key: strconv.Itoa(i % keys), Limit: lv, Hits: 1}
			if _, err := s.Apply(ctx, []limiter.Hit{hit}); err != nil {
				return err
			}
			now += max(step, 1)
		}
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		usec := statField(info, "cmdstat_fcall", "usec_per_call")
		if usec == "?" {
			usec = statField(info, "cmdstat_evalsha", "usec_per_call")
		}
		var mem, n int64
		iter := c.Scan(ctx, 0, "acc:"+strings.ReplaceAll(v.Name, " ", "")+":*", 1000).Iterator()
		for iter.Next(ctx) {
			m, err := c.MemoryUsage(ctx, iter.Val()).Result()
			if err == nil {
				mem += m
				n++
			}
			c.Del(ctx, iter.Val())
		}
		fmt.Fprintf(w, "| %s | %s | %d |\n", v.Name, usec, mem/max(n, 1))
	}
	return nil
}

// statField reads field of the line of INFO that starts with name.
func statField(info, name, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, name+":") {
			continue
		}
		for _, kv := range strings.Split(strings.TrimSpace(line[len(name)+1:]), ",") {
			if k, v, ok := strings.Cut(kv, "="); ok && k == field {
				return v
			}
		}
	}
	return "?"
}
