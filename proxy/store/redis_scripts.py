"""The Lua scripts of the Redis store: each write to a thread is one script, so atomic.

A script runs alone on the server: another instance's write to the same thread happens
before it or after it, never in between. So a checkpoint's seq, the thread's count and its
latest event move together, and `last_activity` keeps the later of two touches however they
interleave, and `last_estimate` that of the later touch that gave one (`estimate_at`): an
instance's touch held back and written late never replaces another's newer one. They run as
every script of the backend does (`proxy/store/redis_eval.py`): by digest, loaded again when
the server forgot them.

Times travel as Python's `repr` of the float and are stored as the very text a caller sent:
Lua would print a number back with 14 digits only. Lua only compares them (`tonumber`).
The layout of the keys they touch is in `proxy/store/redis_keys.py`.
"""

from __future__ import annotations

# Every thread-writing script gets KEYS[1..6] = the thread's hash, the threads' zset, the
# thread id's tenant set, the thread's anchors, checkpoints and history, ARGV[1..3] = digest,
# tenant, thread id, and last (`ARGV[#ARGV]`) the retention in ms, '0' for none. Each write
# gives all the thread's keys (and its id's tenant set) that retention as TTL, from now: a
# thread expires whole once it has had no write for that long, and an active thread's older
# keys (a checkpoint written weeks ago) never before it. '0' takes any TTL off them. The lease
# keeps its own expiry; the threads' zset loses a thread a day after its keys expired (the
# instances' clocks may differ; `list_threads` skips one whose hash is gone already).
_THREAD_FUNCTIONS = """
local function ensure(t, threads, tenants, digest, tenant, thread, at)
  if redis.call('HSETNX', t, 'created_at', at) == 0 then return false end
  redis.call('HSET', t, 'tenant', tenant, 'thread', thread, 'last_activity', at,
             'event_count', 0)
  redis.call('SADD', tenants, tenant)
  redis.call('ZADD', threads, at, digest)
  return true
end
local function rescore(t, threads, digest)
  local touched, anchored = unpack(redis.call('HMGET', t, 'last_activity', 'anchor_at'))
  if anchored and tonumber(anchored) > tonumber(touched) then touched = anchored end
  redis.call('ZADD', threads, touched, digest)
end
local function keep(ttl, t, tenants, anchors, events, history)
  for _, key in ipairs({t, tenants, anchors, events, history}) do
    if ttl == '0' then redis.call('PERSIST', key) else redis.call('PEXPIRE', key, ttl) end
  end
end
"""

# Touches, 6 keys and 5 arguments each (estimate '' for none), then the retention: the later
# time stays, for the activity and the estimate alike (a hash without `estimate_at` takes any
# estimate).
TOUCH = _THREAD_FUNCTIONS + """
local ttl, latest = ARGV[#ARGV], nil
for i = 0, #KEYS / 6 - 1 do
  local t, threads, tenants = KEYS[6 * i + 1], KEYS[6 * i + 2], KEYS[6 * i + 3]
  local digest, tenant, thread, at, estimate = unpack(ARGV, 5 * i + 1, 5 * i + 5)
  if not ensure(t, threads, tenants, digest, tenant, thread, at)
      and tonumber(at) > tonumber(redis.call('HGET', t, 'last_activity')) then
    redis.call('HSET', t, 'last_activity', at)
    rescore(t, threads, digest)
  end
  if estimate ~= '' then
    local dated = redis.call('HGET', t, 'estimate_at')
    if not dated or tonumber(at) >= tonumber(dated) then
      redis.call('HSET', t, 'last_estimate', estimate, 'estimate_at', at)
    end
  end
  keep(ttl, t, tenants, KEYS[6 * i + 4], KEYS[6 * i + 5], KEYS[6 * i + 6])
  latest = at
end
if latest and ttl ~= '0' then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf',
             '(' .. (tonumber(latest) - tonumber(ttl) / 1000 - 86400))
end
"""

# ARGV[4..7] = created-at for a new thread, the anchor's time, its JSON, how many are kept.
ADD_ANCHOR = _THREAD_FUNCTIONS + """
ensure(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
redis.call('LPUSH', KEYS[4], ARGV[6])
redis.call('LTRIM', KEYS[4], 0, tonumber(ARGV[7]) - 1)
redis.call('HSET', KEYS[1], 'anchor_at', ARGV[5])
rescore(KEYS[1], KEYS[2], ARGV[1])
keep(ARGV[#ARGV], KEYS[1], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
"""

# KEYS[7] the thread's lease; ARGV[4..7] = created-at for a new
# thread, the event's JSON object without its seq (which goes in first), the token of the
# lease the writer holds ('' for none) and how many checkpoints there were when it took the
# lease. Returns the seq, or -1 when another holder has the lease or has written a checkpoint
# since (and let the lease go): the writer outlived its own (stalled past `lease_s`), and the
# other may have cut the history back and offloaded its own lines, which this checkpoint's
# `history_end` does not count, and its checkpoint is newer than the state this one was built
# on. A lease that ran out with nobody taking it stops nothing.
ADD_EVENT = _THREAD_FUNCTIONS + """
if ARGV[6] ~= '' then
  local holder = redis.call('GET', KEYS[7])
  if holder and holder ~= ARGV[6] then return -1 end
  if redis.call('LLEN', KEYS[5]) ~= tonumber(ARGV[7]) then return -1 end
end
ensure(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
local seq = redis.call('LLEN', KEYS[5]) + 1
redis.call('RPUSH', KEYS[5], '{"seq":' .. seq .. ',' .. string.sub(ARGV[5], 2))
redis.call('HSET', KEYS[1], 'event_count', seq)
keep(ARGV[#ARGV], KEYS[1], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
return seq
"""

# ARGV[4..5] = created-at for a new thread, the mark's JSON.
SET_MICROCOMPACT = _THREAD_FUNCTIONS + """
ensure(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
redis.call('HSET', KEYS[1], 'microcompact', ARGV[5])
keep(ARGV[#ARGV], KEYS[1], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
"""

# KEYS as a thread-writing script's; ARGV = digest, now (an instance's clock), the retention in
# ms. A thread that no write gave a TTL (written before retention, or with it off) gets what is
# left of the retention since its last activity (its score), at least 1 ms: an idle one expires
# at once. Its id's tenant set, which other tenants' threads share, gets the whole retention,
# and only when it has none: it must outlive them. Returns 1 when it gave one.
EXPIRE_UNTIMED = """
if redis.call('PTTL', KEYS[1]) ~= -1 then return 0 end
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
local left = tonumber(ARGV[3])
if score then left = math.floor((tonumber(score) - tonumber(ARGV[2])) * 1000 + left) end
if left < 1 then left = 1 end
for _, key in ipairs({KEYS[1], KEYS[4], KEYS[5], KEYS[6]}) do
  redis.call('PEXPIRE', key, left)
end
if redis.call('PTTL', KEYS[3]) == -1 then redis.call('PEXPIRE', KEYS[3], ARGV[3]) end
return 1
"""

# KEYS = the thread's hash, anchors, checkpoints; ARGV[1] = how many anchors. One snapshot:
# {hash fields and values, anchors newest first, the latest checkpoint}; {} when unknown.
LOAD = """
local fields = redis.call('HGETALL', KEYS[1])
if #fields == 0 then return {} end
return {fields, redis.call('LRANGE', KEYS[2], 0, tonumber(ARGV[1]) - 1),
        redis.call('LINDEX', KEYS[3], -1)}
"""

# The lease (KEYS[1]) changes only in the hands of the token (ARGV[1]) that holds it.
RENEW_LEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])
"""
RELEASE_LEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('DEL', KEYS[1])
"""

ALL = (TOUCH, ADD_ANCHOR, ADD_EVENT, SET_MICROCOMPACT, EXPIRE_UNTIMED, LOAD, RENEW_LEASE,
       RELEASE_LEASE)
