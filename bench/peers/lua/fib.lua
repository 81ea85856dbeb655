-- fib.lua: recursive fib(n), as examples/scripts/bench/fib.toy. Default n = 32.
-- Runs on Lua 5.4 and LuaJIT.
local function fib(n)
  if n < 2 then return n end
  return fib(n - 1) + fib(n - 2)
end

local n = tonumber(arg[1]) or 32
print(string.format("%d", fib(n)))
