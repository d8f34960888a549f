-- wrk script for bench/ping.sh: GET /ping/<uuid>, the uuid chosen uniformly at
-- random per request from a file of uuids, one per line.
--
--   wrk -t2 -c64 -d10s --latency -s bench/spread.lua http://127.0.0.1:8080 -- uuids.txt
--   PING_UUIDS=uuids.txt wrk ... -s bench/spread.lua http://127.0.0.1:8080
--
-- A file with a single uuid gives the "all pings to one check" load with exactly
-- the same per-request cost in wrk, which keeps the no-op baselines comparable.

local requests = {}

local function load(path)
   local f = assert(io.open(path, "r"), "cannot open uuid file " .. path)
   for line in f:lines() do
      local uuid = line:match("^%s*(%S+)%s*$")
      if uuid then
         -- Formatted once here, so each request costs wrk only a table lookup.
         requests[#requests + 1] = wrk.format("GET", "/ping/" .. uuid)
      end
   end
   f:close()
   assert(#requests > 0, "no uuids in " .. path)
end

local counter = 0

function setup(thread)
   counter = counter + 1
   thread:set("id", counter)
end

function init(args)
   local path = args[1] or os.getenv("PING_UUIDS")
   assert(path, "give the uuid file as `-- FILE` or in PING_UUIDS")
   load(path)
   -- Each wrk thread has its own Lua state: seed each one differently.
   math.randomseed(os.time() * 1000 + (id or 0))
end

function request()
   return requests[math.random(#requests)]
end
