# nbody.py: the 5-body simulation of the benchmarks game (the sun and the four gas giants),
# as examples/scripts/bench/nbody.toy (same float operations, same order). Default n =
# 100000 steps. Prints the energy before and after with "%.9f".
#
# Each body is a list [x, y, z, vx, vy, vz, mass]; the fields are named by the constants.
import math
import sys

PI = 3.141592653589793
SOLAR_MASS = 4.0 * PI * PI
DAYS_PER_YEAR = 365.24
X, Y, Z, VX, VY, VZ, MASS = range(7)


def body(x, y, z, vx, vy, vz, mass):
    return [x, y, z, vx * DAYS_PER_YEAR, vy * DAYS_PER_YEAR, vz * DAYS_PER_YEAR,
            mass * SOLAR_MASS]


BODIES = [
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, SOLAR_MASS],  # the sun, at rest until offset_momentum
    body(4.84143144246472090, -1.16032004402742839, -0.103622044471123109,  # jupiter
         1.66007664274403694e-3, 7.69901118419740425e-3, -6.90460016972063023e-5,
         9.54791938424326609e-4),
    body(8.34336671824457987, 4.12479856412430479, -0.403523417114321381,  # saturn
         -2.76742510726862411e-3, 4.99852801234917238e-3, 2.30417297573763929e-5,
         2.85885980666130812e-4),
    body(12.8943695621391310, -15.1111514016986312, -0.223307578892655734,  # uranus
         2.96460137564761618e-3, 2.37847173959480950e-3, -2.96589568540237556e-5,
         4.36624404335156298e-5),
    body(15.3796971148509165, -25.9193146099879641, 0.179258772950371181,  # neptune
         2.68067772490389322e-3, 1.62824170038242295e-3, -9.51592254519715870e-5,
         5.15138902046611451e-5),
]


def offset_momentum(bodies):
    px = 0.0
    py = 0.0
    pz = 0.0
    for b in bodies:
        px += b[VX] * b[MASS]
        py += b[VY] * b[MASS]
        pz += b[VZ] * b[MASS]
    bodies[0][VX] = -px / SOLAR_MASS
    bodies[0][VY] = -py / SOLAR_MASS
    bodies[0][VZ] = -pz / SOLAR_MASS


def energy(bodies):
    e = 0.0
    nb = len(bodies)
    for i in range(nb):
        bi = bodies[i]
        e += 0.5 * bi[MASS] * (bi[VX] * bi[VX] + bi[VY] * bi[VY] + bi[VZ] * bi[VZ])
        for j in range(i + 1, nb):
            bj = bodies[j]
            dx = bi[X] - bj[X]
            dy = bi[Y] - bj[Y]
            dz = bi[Z] - bj[Z]
            e -= (bi[MASS] * bj[MASS]) / math.sqrt(dx * dx + dy * dy + dz * dz)
    return e


def advance(bodies, dt):
    sqrt = math.sqrt
    nb = len(bodies)
    for i in range(nb):
        bi = bodies[i]
        for j in range(i + 1, nb):
            bj = bodies[j]
            dx = bi[X] - bj[X]
            dy = bi[Y] - bj[Y]
            dz = bi[Z] - bj[Z]
            d2 = dx * dx + dy * dy + dz * dz
            mag = dt / (d2 * sqrt(d2))
            bm = bj[MASS] * mag
            bi[VX] -= dx * bm
            bi[VY] -= dy * bm
            bi[VZ] -= dz * bm
            bm = bi[MASS] * mag
            bj[VX] += dx * bm
            bj[VY] += dy * bm
            bj[VZ] += dz * bm
    for b in bodies:
        b[X] += dt * b[VX]
        b[Y] += dt * b[VY]
        b[Z] += dt * b[VZ]


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
    offset_momentum(BODIES)
    print("%.9f" % energy(BODIES))
    for _ in range(n):
        advance(BODIES, 0.01)
    print("%.9f" % energy(BODIES))


main()
