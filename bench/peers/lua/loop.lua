-- loop.lua: s = (s * 31 + i) % 1000003 for i in 0..n, as examples/scripts/bench/loop.toy.
-- Default n = 10000000. Runs on Lua 5.4 (integers) and LuaJIT (doubles: every value here
-- stays far below 2^53, so both give the same digits).
local n = tonumber(arg[1]) or 10000000
local s = 0
for i = 0, n - 1 do
  s = (s * 31 + i) % 1000003
end
print(string.format("%d", s))
