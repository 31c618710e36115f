-- wrk script for bench/table.py's peers rows: every request is the one a request file
-- describes, and every answer is checked.
--
--   WRK_REQUEST=request.txt wrk -t2 -c32 -d5s -s bench/peers/wrk_request.lua http://127.0.0.1:PORT
--
-- The request file (WRK_REQUEST):
--   POST /mcp                      the method and path
--   Content-Type: application/json header lines, up to the first empty line
--   @expect: "message":"hi"        not sent: a string every good answer's body contains
--   @status: 200                   not sent: the good answers' status (default 200)
--   @pick: s1 s2 s3                not sent: the values `{pick}` takes, in turn
--                                  (empty line)
--   {"jsonrpc":"2.0",...}          the body: the rest of the file, sent as is
-- In header values, `{seq}` is a value no other request of the run has (WRK_RUN, the
-- thread and a counter: a webhook's new delivery id) and `{pick}` the next @pick value
-- (e.g. one of several MCP sessions). Without either, wrk sends one prebuilt request.
--
-- At the end it prints one line for bench/table.py:
--   @wrk requests=N duration_us=N p50_us=N p90_us=N p99_us=N max_us=N errors=N unexpected=N
-- where errors are socket errors and timeouts, and unexpected the answers with another
-- status or without the @expect string (wrk's own non-2xx count is among them).

local path_env = os.getenv("WRK_REQUEST")
if not path_env then
  error("WRK_REQUEST must name the request file (see the top of wrk_request.lua)")
end
local file = assert(io.open(path_env, "rb"))
local text = file:read("*a")
file:close()

local head, body = text:match("^(.-)\r?\n\r?\n(.*)$")
if not head then
  head, body = text:gsub("\r?\n$", ""), ""
end
local lines = {}
for line in (head .. "\n"):gmatch("(.-)\r?\n") do
  lines[#lines + 1] = line
end
local method, path = lines[1]:match("^(%u+)%s+(%S+)$")
if not method then
  error("the request file's first line must be `METHOD /path`, not: " .. lines[1])
end

local headers, expect, status, picks = {}, nil, 200, {}
for i = 2, #lines do
  local name, value = lines[i]:match("^([^:]+):%s*(.-)%s*$")
  if not name then
    error("not a header line in the request file: " .. lines[i])
  end
  if name == "@expect" then
    expect = value
  elseif name == "@status" then
    status = tonumber(value)
  elseif name == "@pick" then
    for v in value:gmatch("%S+") do
      picks[#picks + 1] = v
    end
  else
    headers[name] = value
  end
end

wrk.method, wrk.path, wrk.headers, wrk.body = method, path, headers, body
local dynamic = text:find("{seq}", 1, true) or text:find("{pick}", 1, true)
if text:find("{pick}", 1, true) and #picks == 0 then
  error("the request uses {pick} but the file has no `@pick:` line")
end

-- The request cut at its placeholders: text, {placeholder}, text, ... Built in init(),
-- when wrk has added the Host header.
local parts = {}
local function cut(template)
  local at = 1
  while true do
    local s, e, name = template:find("{(%a+)}", at)
    while s and name ~= "seq" and name ~= "pick" do
      s, e, name = template:find("{(%a+)}", e + 1)
    end
    if not s then
      parts[#parts + 1] = template:sub(at)
      return
    end
    parts[#parts + 1] = template:sub(at, s - 1)
    parts[#parts + 1] = { name }
    at = e + 1
  end
end

local threads = {}
function setup(thread)
  thread:set("thread_id", #threads + 1)
  threads[#threads + 1] = thread
end

local run = os.getenv("WRK_RUN") or tostring(os.time())
counter, unexpected = 0, 0 -- globals: done() reads `unexpected` through thread:get
local out = {}

function init(_)
  -- thread_id is set by setup() before init runs in the thread's own Lua state; each
  -- thread starts at another @pick value.
  counter = (thread_id or 1) * 7919 % math.max(#picks, 1)
  cut(wrk.format(method, path, headers, body))
end

if dynamic then
  function request()
    counter = counter + 1
    for i = 1, #parts do
      local p = parts[i]
      if type(p) == "table" then
        if p[1] == "seq" then
          out[i] = run .. "-" .. tostring(thread_id or 0) .. "-" .. counter
        else
          out[i] = picks[counter % #picks + 1]
        end
      else
        out[i] = p
      end
    end
    return table.concat(out)
  end
end

function response(code, _, answer)
  if code ~= status or (expect and not (answer and answer:find(expect, 1, true))) then
    unexpected = unexpected + 1
  end
end

function done(summary, latency, _)
  local bad = 0
  for _, t in ipairs(threads) do
    bad = bad + (t:get("unexpected") or 0)
  end
  local e = summary.errors
  io.write(string.format(
    "@wrk requests=%d duration_us=%d p50_us=%d p90_us=%d p99_us=%d max_us=%d errors=%d unexpected=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max, e.connect + e.read + e.write + e.timeout, bad))
end
