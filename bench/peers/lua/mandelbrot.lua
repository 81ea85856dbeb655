-- mandelbrot.lua: iterations over an n x n grid on [-1.5, 0.5] x [-1, 1], at most 50 per
-- point, as examples/scripts/bench/mandelbrot.toy (same float operations, same order).
-- Default n = 400.
local function mandelbrot(size, max_iter)
  local total = 0
  for y = 0, size - 1 do
    local ci = 2.0 * y / size - 1.0
    for x = 0, size - 1 do
      local cr = 2.0 * x / size - 1.5
      local zr, zi = 0.0, 0.0
      local i = 0
      while i < max_iter and zr * zr + zi * zi <= 4.0 do
        local t = zr * zr - zi * zi + cr
        zi = 2.0 * zr * zi + ci
        zr = t
        i = i + 1
      end
      total = total + i
    end
  end
  return total
end

local size = tonumber(arg[1]) or 400
print(string.format("%d", mandelbrot(size, 50)))
