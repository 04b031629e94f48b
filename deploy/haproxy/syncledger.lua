-- SyncLedger's routing for HAProxy (2.2 or later, built with Lua; Debian's is): sends each
-- request of an identity to the node that owns the identity's shard, so that a cluster node
-- rarely forwards a write to another. The balancer learns who owns what from the answers: every
-- cluster node names, in each answer about an identity, the shard (`x-syncledger-shard`), the
-- cluster's shard count (`x-syncledger-shards`) and the shard's owner (`x-syncledger-shard-owner`,
-- a node id, which must be the name of that node's server in the backend). Until it knows, and
-- for requests that name no identity, the backend balances as usual; a request sent
-- to a node that no longer owns the shard is still forwarded by that node (its answer teaches
-- the balancer the new owner). See docs/cluster.md, "Routing requests to their owner".
--
-- The shard of an identity is SyncLedger's ShardMap: the first 8 bytes of
-- SHA-256(pool ‖ 0x00 ‖ identity), read big-endian, modulo the shard count.

local owners = {}      -- shard number → owning node id, as the last answer about it said
local shard_count = nil

local function percent_decode(text)
  return (text:gsub("%%(%x%x)", function(hex) return string.char(tonumber(hex, 16)) end))
end

-- The unsigned 64-bit big-endian number in `digest`'s first 8 bytes, modulo `count`, without
-- overflowing Lua's signed integers: (hi·2³² + lo) mod n from the two 32-bit halves.
local function shard_of(txn, pool, identity, count)
  local digest = txn.c:sha2(pool .. "\0" .. identity, 256)
  local hi, lo = string.unpack(">I4I4", digest)
  return ((hi % count) * (4294967296 % count) + lo % count) % count
end

-- http-request lua.syncledger_route: sets txn.syncledger_owner to the owner's node id (its
-- server's name) when known; the backend's use-server rules pick that server.
core.register_action("syncledger_route", { "http-req" }, function(txn)
  if shard_count == nil then return end
  local shard
  local pool, identity = txn.sf:path():match("^/identitypools/([^/]+)/identities/([^/]+)")
  if pool ~= nil then
    shard = shard_of(txn, percent_decode(pool), percent_decode(identity), shard_count)
  else
    local target = txn.sf:req_hdr("x-amz-target")
    if target ~= nil and target:sub(1, 26) == "AWSCognitoIdentityService." then
      shard = 0  -- Cognito Identity's writes belong to the registry shard
    end
  end
  if shard ~= nil and owners[shard] ~= nil then
    txn:set_var("txn.syncledger_owner", owners[shard])
  end
end)

-- http-response lua.syncledger_learn: keeps what the answer says of its shard's owner.
core.register_action("syncledger_learn", { "http-res" }, function(txn)
  local count = tonumber(txn.sf:res_hdr("x-syncledger-shards"))
  if count ~= nil and count >= 1 and count <= 4096 then shard_count = count end
  local shard = tonumber(txn.sf:res_hdr("x-syncledger-shard"))
  local owner = txn.sf:res_hdr("x-syncledger-shard-owner")
  if shard ~= nil and owner ~= nil and owner ~= "" then owners[shard] = owner end
end)
