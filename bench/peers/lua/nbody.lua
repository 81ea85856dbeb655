-- nbody.lua: the 5-body simulation of the benchmarks game (the sun and the four gas giants),
-- as examples/scripts/bench/nbody.toy (same float operations, same order). Default n =
-- 100000 steps. Prints the energy before and after with "%.9f".
local sqrt = math.sqrt
local PI = 3.141592653589793
local SOLAR_MASS = 4.0 * PI * PI
local DAYS_PER_YEAR = 365.24

local function body(x, y, z, vx, vy, vz, mass)
  return { x = x, y = y, z = z, vx = vx * DAYS_PER_YEAR, vy = vy * DAYS_PER_YEAR,
           vz = vz * DAYS_PER_YEAR, mass = mass * SOLAR_MASS }
end

local bodies = {
  -- the sun: at rest at the origin until offset_momentum
  { x = 0.0, y = 0.0, z = 0.0, vx = 0.0, vy = 0.0, vz = 0.0, mass = SOLAR_MASS },
  body(4.84143144246472090, -1.16032004402742839, -0.103622044471123109, -- jupiter
       1.66007664274403694e-3, 7.69901118419740425e-3, -6.90460016972063023e-5,
       9.54791938424326609e-4),
  body(8.34336671824457987, 4.12479856412430479, -0.403523417114321381, -- saturn
       -2.76742510726862411e-3, 4.99852801234917238e-3, 2.30417297573763929e-5,
       2.85885980666130812e-4),
  body(12.8943695621391310, -15.1111514016986312, -0.223307578892655734, -- uranus
       2.96460137564761618e-3, 2.37847173959480950e-3, -2.96589568540237556e-5,
       4.36624404335156298e-5),
  body(15.3796971148509165, -25.9193146099879641, 0.179258772950371181, -- neptune
       2.68067772490389322e-3, 1.62824170038242295e-3, -9.51592254519715870e-5,
       5.15138902046611451e-5),
}
local nb = #bodies

local function offset_momentum()
  local px, py, pz = 0.0, 0.0, 0.0
  for i = 1, nb do
    local b = bodies[i]
    px = px + b.vx * b.mass
    py = py + b.vy * b.mass
    pz = pz + b.vz * b.mass
  end
  local sun = bodies[1]
  sun.vx = -px / SOLAR_MASS
  sun.vy = -py / SOLAR_MASS
  sun.vz = -pz / SOLAR_MASS
end

local function energy()
  local e = 0.0
  for i = 1, nb do
    local bi = bodies[i]
    e = e + 0.5 * bi.mass * (bi.vx * bi.vx + bi.vy * bi.vy + bi.vz * bi.vz)
    for j = i + 1, nb do
      local bj = bodies[j]
      local dx = bi.x - bj.x
      local dy = bi.y - bj.y
      local dz = bi.z - bj.z
      e = e - (bi.mass * bj.mass) / sqrt(dx * dx + dy * dy + dz * dz)
    end
  end
  return e
end

local function advance(dt)
  for i = 1, nb do
    local bi = bodies[i]
    for j = i + 1, nb do
      local bj = bodies[j]
      local dx = bi.x - bj.x
      local dy = bi.y - bj.y
      local dz = bi.z - bj.z
      local d2 = dx * dx + dy * dy + dz * dz
      local mag = dt / (d2 * sqrt(d2))
      local bm = bj.mass * mag
      bi.vx = bi.vx - dx * bm
      bi.vy = bi.vy - dy * bm
      bi.vz = bi.vz - dz * bm
      bm = bi.mass * mag
      bj.vx = bj.vx + dx * bm
      bj.vy = bj.vy + dy * bm
      bj.vz = bj.vz + dz * bm
    end
  end
  for i = 1, nb do
    local b = bodies[i]
    b.x = b.x + dt * b.vx
    b.y = b.y + dt * b.vy
    b.z = b.z + dt * b.vz
  end
end

local n = tonumber(arg[1]) or 100000
offset_momentum()
print(string.format("%.9f", energy()))
for _ = 1, n do
  advance(0.01)
end
print(string.format("%.9f", energy()))
