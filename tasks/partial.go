package tasks

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/store"
)

// The running round's text so far is kept in Redis beside the live stream,
// so that a watcher who joins mid-round can show it: a hash with the turn
// and the cursor the round follows, and a string with the text. Both are
// updated by the same script that publishes, so what a watcher reads is
// always consistent with the stream it receives.

// partialTTL is how long a round's text outlives its last delta.
const partialTTL = time.Hour

// partialTTLArg is partialTTL as the scripts take it, in milliseconds,
// boxed once for their argument lists.
var partialTTLArg any = strconv.FormatInt(partialTTL.Milliseconds(), 10)

// PartialKey is the hash (turn, after) of a session's running round.
func (n Names) PartialKey(session string) string {
	return n.Namespace + "ballet:planner:partial:{" + session + "}"
}

// PartialTextKey holds the running round's text so far.
func (n Names) PartialTextKey(session string) string {
	return n.PartialKey(session) + partialTextSuffix
}

// partialTextSuffix makes a session's PartialKey its PartialTextKey.
const partialTextSuffix = ":text"

// publishStored publishes a stored output and moves the session's running
// round: `started` begins one; a later output of the same turn begins the
// next round (empty text); its `done` removes the round.
// KEYS: partial hash, partial text. ARGV: channel, message, turn, cursor, type, ttl ms.
var publishStored = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], 'turn')
if ARGV[5] == 'started' then
  redis.call('HSET', KEYS[1], 'turn', ARGV[3], 'after', ARGV[4])
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
  redis.call('SET', KEYS[2], '', 'PX', ARGV[6])
elseif cur == ARGV[3] and tonumber(ARGV[4]) > tonumber(redis.call('HGET', KEYS[1], 'after')) then
  if ARGV[5] == 'done' then
    redis.call('DEL', KEYS[1], KEYS[2])
  else
    redis.call('HSET', KEYS[1], 'after', ARGV[4])
    redis.call('PEXPIRE', KEYS[1], ARGV[6])
    redis.call('SET', KEYS[2], '', 'PX', ARGV[6])
  end
end
return redis.call('PUBLISH', ARGV[1], ARGV[2])
`)

// publishText appends a text delta to the running round of its turn and
// publishes it with "text_after", the cursor the round follows, and
// "text_end", the length of the round's text after it: a watcher that read
// the text so far drops what it has, and one whose replay ran ahead of the
// stream drops the deltas of a round that is over.
// KEYS: partial hash, partial text. ARGV: channel, message, turn, delta, ttl ms.
var publishText = redis.NewScript(`
local msg = ARGV[2]
local meta = redis.call('HMGET', KEYS[1], 'turn', 'after')
if meta[1] == ARGV[3] then
  local n = redis.call('APPEND', KEYS[2], ARGV[4])
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
  redis.call('PEXPIRE', KEYS[2], ARGV[5])
  msg = string.sub(msg, 1, -2) .. ',"text_after":' .. meta[2] .. ',"text_end":' .. n .. '}'
end
return redis.call('PUBLISH', ARGV[1], msg)
`)

// publishArgs are the script, keys and arguments that publish o.
func (p *Publisher) publishArgs(o store.Output) (*redis.Script, []string, []any, error) {
	b, err := encodeOutput(&o)
	if err != nil {
		return nil, nil, nil, err
	}
	hash := p.names.PartialKey(o.Session)
	keys := []string{hash, hash + partialTextSuffix}
	ch := p.names.SessionChannel(o.Session)
	if o.Type == store.OutputText {
		return publishText, keys, []any{ch, b, o.Turn, o.Text, partialTTLArg}, nil
	}
	return publishStored, keys, []any{ch, b, o.Turn, o.Cursor, o.Type, partialTTLArg}, nil
}

// publish sends one output on its session's channel through the scripts.
func (p *Publisher) publish(ctx context.Context, o store.Output) error {
	script, keys, args, err := p.publishArgs(o)
	if err != nil {
		return err
	}
	return script.Run(ctx, p.rdb, keys, args...).Err()
}

// publishAll sends outs in one round trip, in order, and returns each
// one's error. A pipeline carries each script whole (EVAL, which Redis
// caches by its digest): a script missing from the cache there could not
// be sent again without the outputs after it going first.
func (p *Publisher) publishAll(ctx context.Context, outs []store.Output) []error {
	errs := make([]error, len(outs))
	if len(outs) == 1 {
		errs[0] = p.publish(ctx, outs[0])
		return errs
	}
	cmds := make([]*redis.Cmd, len(outs))
	_, _ = p.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, o := range outs {
			script, keys, args, err := p.publishArgs(o)
			if err != nil {
				errs[i] = err
				continue
			}
			cmds[i] = script.Eval(ctx, pipe, keys, args...)
		}
		return nil
	})
	for i, cmd := range cmds {
		if cmd != nil {
			errs[i] = cmd.Err()
		}
	}
	return errs
}

// partial is a session's running round as stored: the turn, the cursor the
// round follows, and its text so far.
type partial struct {
	Turn  string
	After int64
	Text  string
}

// readPartial reads a session's running round; none is a zero partial.
func readPartial(ctx context.Context, rdb redis.UniversalClient, names Names, session string) (partial, error) {
	var meta *redis.MapStringStringCmd
	var text *redis.StringCmd
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		meta = p.HGetAll(ctx, names.PartialKey(session))
		text = p.Get(ctx, names.PartialTextKey(session))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return partial{}, fmt.Errorf("tasks: read running text: %w", err)
	}
	m := meta.Val()
	if m["turn"] == "" {
		return partial{}, nil
	}
	after, _ := strconv.ParseInt(m["after"], 10, 64)
	return partial{Turn: m["turn"], After: after, Text: text.Val()}, nil
}
