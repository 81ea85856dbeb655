-- spectral.lua: the spectral norm of the infinite matrix A(i, j), 10 power iterations, as
-- examples/scripts/bench/spectral.toy (same float operations, same order). Default n = 250.
-- Indices run from 0 like the Toy version's. (i+j)(i+j+1) is even, so `/ 2` (a float
-- division in both Lua 5.4 and LuaJIT) is exact and equals the Toy program's int division.
local function eval_a(i, j)
  return 1.0 / ((i + j) * (i + j + 1) / 2 + i + 1)
end

local function a_times_u(u, v, n)
  for i = 0, n - 1 do
    local s = 0.0
    for j = 0, n - 1 do s = s + eval_a(i, j) * u[j] end
    v[i] = s
  end
end

local function at_times_u(u, v, n)
  for i = 0, n - 1 do
    local s = 0.0
    for j = 0, n - 1 do s = s + eval_a(j, i) * u[j] end
    v[i] = s
  end
end

local function ata_times_u(u, v, tmp, n)
  a_times_u(u, tmp, n)
  at_times_u(tmp, v, n)
end

local n = tonumber(arg[1]) or 250
local u, v, tmp = {}, {}, {}
for i = 0, n - 1 do
  u[i], v[i], tmp[i] = 1.0, 0.0, 0.0
end
for _ = 1, 10 do
  ata_times_u(u, v, tmp, n)
  ata_times_u(v, u, tmp, n)
end
local vbv, vv = 0.0, 0.0
for i = 0, n - 1 do
  vbv = vbv + u[i] * v[i]
  vv = vv + v[i] * v[i]
end
print(string.format("%.9f", math.sqrt(vbv / vv)))
