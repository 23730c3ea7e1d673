// Package tasks is the contract between the api and the workers: task types
// and payloads, queue names, enqueue and cancel, output types, channel names,
// and the Redis connection they share.
package tasks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// RedisConfig is the [redis] section of the configuration.
type RedisConfig struct {
	// URL is a redis:// or rediss:// URL for a single server.
	URL string `toml:"url" secret:"true"`
	// SentinelAddrs, with SentinelMaster, selects Redis Sentinel instead of URL.
	SentinelAddrs  []string `toml:"sentinel_addrs"`
	SentinelMaster string   `toml:"sentinel_master"`
	// ClusterAddrs selects Redis Cluster instead of URL.
	ClusterAddrs []string `toml:"cluster_addrs"`
	// Password for Sentinel or Cluster nodes.
	Password string `toml:"password" secret:"true"`
	// Namespace prefixes queue names and pub/sub channels, so that several
	// deployments (or test runs) can share one Redis.
	Namespace string `toml:"namespace"`
	// DialTimeout bounds each connection attempt.
	DialTimeout time.Duration `toml:"dial_timeout"`
}

// DefaultRedisConfig returns the built-in Redis defaults.
func DefaultRedisConfig() RedisConfig {
	return RedisConfig{URL: "redis://127.0.0.1:6379/0", DialTimeout: 3 * time.Second}
}

// Validate reports the first invalid key of the section.
func (c RedisConfig) Validate() error {
	switch {
	case len(c.ClusterAddrs) > 0 && len(c.SentinelAddrs) > 0:
		return errors.New("redis.cluster_addrs: cannot be combined with redis.sentinel_addrs")
	case len(c.SentinelAddrs) > 0 && c.SentinelMaster == "":
		return errors.New("redis.sentinel_master: required with redis.sentinel_addrs")
	case len(c.ClusterAddrs) == 0 && len(c.SentinelAddrs) == 0:
		if c.URL == "" {
			return errors.New("redis.url: must not be empty")
		}
		if _, err := redis.ParseURL(c.URL); err != nil {
			return fmt.Errorf("redis.url: %w", err)
		}
	}
	if strings.ContainsAny(c.Namespace, " {}") {
		return errors.New("redis.namespace: must not contain spaces or braces")
	}
	if c.DialTimeout <= 0 {
		return errors.New("redis.dial_timeout: must be positive")
	}
	return nil
}

// NewRedisClient builds the one go-redis client a process shares between
// asynq, pub/sub and rate limits.
func NewRedisClient(c RedisConfig) (redis.UniversalClient, error) {
	switch {
	case len(c.ClusterAddrs) > 0:
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.ClusterAddrs, Password: c.Password, DialTimeout: c.DialTimeout}), nil
	case len(c.SentinelAddrs) > 0:
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: c.SentinelMaster,
			SentinelAddrs: c.SentinelAddrs, Password: c.Password, DialTimeout: c.DialTimeout}), nil
	}
	opt, err := redis.ParseURL(c.URL)
	if err != nil {
		return nil, fmt.Errorf("tasks: redis url: %w", err)
	}
	opt.DialTimeout = c.DialTimeout
	return redis.NewClient(opt), nil
}

// Ping checks that Redis answers, naming where it looked when it does not.
func Ping(ctx context.Context, rdb redis.UniversalClient, c RedisConfig) error {
	if err := rdb.Ping(ctx).Err(); err != nil {
		where := c.URL
		if opt, perr := redis.ParseURL(c.URL); perr == nil {
			where = opt.Addr
		}
		if len(c.ClusterAddrs) > 0 {
			where = strings.Join(c.ClusterAddrs, ",")
		} else if len(c.SentinelAddrs) > 0 {
			where = strings.Join(c.SentinelAddrs, ",")
		}
		return fmt.Errorf("tasks: redis at %s is unreachable: %w", where, err)
	}
	return nil
}

// AsynqConnOpt is the connection asynq tools that build their own client
// (the dashboard) use.
func (c RedisConfig) AsynqConnOpt() (asynq.RedisConnOpt, error) {
	switch {
	case len(c.ClusterAddrs) > 0:
		return asynq.RedisClusterClientOpt{Addrs: c.ClusterAddrs, Password: c.Password}, nil
	case len(c.SentinelAddrs) > 0:
		return asynq.RedisFailoverClientOpt{MasterName: c.SentinelMaster, SentinelAddrs: c.SentinelAddrs, Password: c.Password}, nil
	}
	opt, err := asynq.ParseRedisURI(c.URL)
	if err != nil {
		return nil, fmt.Errorf("tasks: redis url: %w", err)
	}
	return opt, nil
}
