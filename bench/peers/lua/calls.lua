-- calls.lua: s = add(s, i) for i in 0..n, as examples/scripts/bench/calls.toy.
-- Default n = 10000000. The sum stays below 2^53, so LuaJIT's doubles are exact.
local function add(a, b)
  return a + b
end

local n = tonumber(arg[1]) or 10000000
local s = 0
for i = 0, n - 1 do
  s = add(s, i)
end
print(string.format("%d", s))
