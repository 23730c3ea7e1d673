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
// so that a watcher who joins mid-round can show it: a hash with the turn,
// the cursor the round follows, the attempt its text belongs to, and "over"
// once the turn is done; and a string with the text. Both are updated by
// the same script that publishes, so what a watcher reads is always
// consistent with the stream it receives.
//
// The scripts are the fence of the live stream: a text delta of an attempt
// older than the round's (a worker that lost its lease, or a model call
// made again), or of a turn that is done, is dropped there, and a delta
// carries its offset in the round's text, so a delta sent again (a publish
// that timed out but ran) is not appended twice.

// partialTTL is how long a round's text outlives its last delta.
const partialTTL = time.Hour

// partialTTLArg is partialTTL as the scripts take it, in milliseconds,
// boxed once for their argument lists.
var partialTTLArg any = strconv.FormatInt(partialTTL.Milliseconds(), 10)

// PartialKey is the hash (turn, after, attempt, over) of a session's
// running round.
func (n Names) PartialKey(session string) string {
	return n.Namespace + "ballet:planner:partial:{" + session + "}"
}

// PartialTextKey holds the running round's text so far.
func (n Names) PartialTextKey(session string) string {
	return n.PartialKey(session) + partialTextSuffix
}

// partialTextSuffix makes a session's PartialKey its PartialTextKey.
const partialTextSuffix = ":text"

// AttemptsPerLease is how many attempts at a round's text one lease has:
// a text output's attempt is the worker's fencing token × AttemptsPerLease
// plus the model call's try.
const AttemptsPerLease = 1000

// LiveAttempt is the attempt of the text a worker holding fencing token
// token streams in its model call's try (0 the first).
func LiveAttempt(token int64, try int) int64 { return token*AttemptsPerLease + int64(try) }

// publishStored publishes a stored output and moves the session's running
// round: `started` begins one; a later output of the same turn begins the
// next round (empty text); its `done` ends the turn's rounds, so that no
// late delta of it is shown. An output a worker published under its fence
// sets the round's attempt (ARGV[7] > 0).
// KEYS: partial hash, partial text. ARGV: channel, message, turn, cursor, type, ttl ms, attempt.
var publishStored = redis.NewScript(`
local meta = redis.call('HMGET', KEYS[1], 'turn', 'after', 'over')
if ARGV[5] == 'started' then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'turn', ARGV[3], 'after', ARGV[4], 'attempt', ARGV[7])
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
  redis.call('SET', KEYS[2], '', 'PX', ARGV[6])
elseif meta[1] == ARGV[3] and not meta[3] and tonumber(ARGV[4]) > tonumber(meta[2]) then
  if ARGV[5] == 'done' then
    redis.call('HSET', KEYS[1], 'over', '1')
    redis.call('PEXPIRE', KEYS[1], ARGV[6])
    redis.call('DEL', KEYS[2])
  else
    redis.call('HSET', KEYS[1], 'after', ARGV[4])
    if ARGV[7] ~= '0' then
      redis.call('HSET', KEYS[1], 'attempt', ARGV[7])
    end
    redis.call('PEXPIRE', KEYS[1], ARGV[6])
    redis.call('SET', KEYS[2], '', 'PX', ARGV[6])
  end
end
return redis.call('PUBLISH', ARGV[1], ARGV[2])
`)

// publishText places a text delta in the running round of its turn and
// publishes the part that is new, with "text_after", the cursor the round
// follows, and "text_end", the length of the round's text after it. ARGV[5]
// is where the delta starts in its attempt's text: what the round holds
// already is not appended again, and a delta past the round's end (one
// before it was lost) is not placed. A newer attempt starts the round's
// text over; an older one, another turn's round or a turn that is done
// drops the delta. It returns the length of the round's text (the caller
// sends from there next), -1 for a dropped delta, -2 for one published
// without a place because Redis keeps no round (its data was lost). An
// attempt of 0 is the round's; a negative offset is the round's end.
// KEYS: partial hash, partial text. ARGV: channel, message head (textHead), turn, text, offset, attempt, ttl ms.
var publishText = redis.NewScript(`
local meta = redis.call('HMGET', KEYS[1], 'turn', 'after', 'attempt', 'over')
if not meta[1] then
  local head = ARGV[2]
  if ARGV[6] ~= '0' then
    head = head .. ',"attempt":' .. ARGV[6]
  end
  redis.call('PUBLISH', ARGV[1], head .. ',"text":' .. cjson.encode(ARGV[4]) .. '}')
  return -2
end
if meta[1] ~= ARGV[3] or meta[4] then
  return -1
end
local attempt, cur = tonumber(ARGV[6]), tonumber(meta[3]) or 0
if attempt == 0 then
  attempt = cur
end
local len = 0
if attempt < cur then
  return -1
elseif attempt > cur then
  redis.call('HSET', KEYS[1], 'attempt', ARGV[6])
  redis.call('SET', KEYS[2], '', 'PX', ARGV[7])
else
  len = redis.call('STRLEN', KEYS[2])
end
local off = tonumber(ARGV[5])
if off < 0 then
  off = len
end
if off > len then
  return len
end
local text = string.sub(ARGV[4], len - off + 1)
if text == '' then
  return len
end
local n = redis.call('APPEND', KEYS[2], text)
redis.call('PEXPIRE', KEYS[1], ARGV[7])
redis.call('PEXPIRE', KEYS[2], ARGV[7])
redis.call('PUBLISH', ARGV[1], ARGV[2] .. ',"attempt":' .. attempt .. ',"text":' .. cjson.encode(text) ..
  ',"text_after":' .. meta[2] .. ',"text_end":' .. n .. '}')
return n
`)

// fenceRound makes a round's attempt at least ARGV[2] and starts its text
// over when that raises it: a worker that takes a turn over calls it before
// it streams, so that the text of the worker it replaced is dropped from
// then on, not only once the new attempt's first delta arrives.
// KEYS: partial hash, partial text. ARGV: turn, attempt, ttl ms.
var fenceRound = redis.NewScript(`
local meta = redis.call('HMGET', KEYS[1], 'turn', 'attempt', 'over')
if meta[1] == ARGV[1] and not meta[3] and tonumber(ARGV[2]) > (tonumber(meta[2]) or 0) then
  redis.call('HSET', KEYS[1], 'attempt', ARGV[2])
  redis.call('SET', KEYS[2], '', 'PX', ARGV[3])
  return 1
end
return 0
`)

// publishArgs are the script, keys and arguments that publish o, a stored
// output, under attempt (0: not a worker's); tc is the trace context the
// message carries (fanout.go), nil for none.
func (p *Publisher) publishArgs(o store.Output, attempt int64, tc []byte) (*redis.Script, []string, []any, error) {
	if o.Type == store.OutputText {
		head, err := textHead(o.Session, o.Turn)
		if err != nil {
			return nil, nil, nil, err
		}
		return p.textArgs(head, TextDelta{Session: o.Session, Turn: o.Turn, Offset: -1, Text: o.Text})
	}
	b, err := encodeOutput(&o)
	if err != nil {
		return nil, nil, nil, err
	}
	if tc != nil {
		b = append(append(b[:len(b)-1], tc...), '}')
	}
	hash := p.names.PartialKey(o.Session)
	keys := []string{hash, hash + partialTextSuffix}
	ch := p.names.SessionChannel(o.Session)
	return publishStored, keys, []any{ch, b, o.Turn, o.Cursor, o.Type, partialTTLArg, attempt}, nil
}

// textHead is a text output's JSON without its attempt, text, offsets and
// closing brace, which publishText adds.
func textHead(session, turn string) ([]byte, error) {
	head, err := encodeOutput(&store.Output{Session: session, Turn: turn, Type: store.OutputText})
	if err != nil {
		return nil, err
	}
	return head[:len(head)-1], nil
}

// textArgs are publishText's keys and arguments for d.
func (p *Publisher) textArgs(head []byte, d TextDelta) (*redis.Script, []string, []any, error) {
	hash := p.names.PartialKey(d.Session)
	return publishText, []string{hash, hash + partialTextSuffix},
		[]any{p.names.SessionChannel(d.Session), head, d.Turn, d.Text, d.Offset, d.Attempt, partialTTLArg}, nil
}

// publish sends one output on its session's channel through the scripts.
func (p *Publisher) publish(ctx context.Context, o store.Output, attempt int64, tc []byte) error {
	script, keys, args, err := p.publishArgs(o, attempt, tc)
	if err != nil {
		return err
	}
	return script.Run(ctx, p.rdb, keys, args...).Err()
}

// publishAll sends outs in one round trip, in order, and returns each
// one's error. A pipeline carries each script whole (EVAL, which Redis
// caches by its digest): a script missing from the cache there could not
// be sent again without the outputs after it going first.
func (p *Publisher) publishAll(ctx context.Context, outs []store.Output, attempt int64) []error {
	errs := make([]error, len(outs))
	tc := traceFields(ctx)
	if len(outs) == 1 {
		errs[0] = p.publish(ctx, outs[0], attempt, tc)
		return errs
	}
	cmds := make([]*redis.Cmd, len(outs))
	_, _ = p.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, o := range outs {
			script, keys, args, err := p.publishArgs(o, attempt, tc)
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
// round follows, the attempt its text belongs to, and its text so far.
type partial struct {
	Turn    string
	After   int64
	Attempt int64
	Text    string
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
	if m["turn"] == "" || m["over"] != "" {
		return partial{}, nil
	}
	after, _ := strconv.ParseInt(m["after"], 10, 64)
	attempt, _ := strconv.ParseInt(m["attempt"], 10, 64)
	return partial{Turn: m["turn"], After: after, Attempt: attempt, Text: text.Val()}, nil
}
