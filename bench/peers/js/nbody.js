// nbody.js: the 5-body simulation of the benchmarks game (the sun and the four gas giants),
// as examples/scripts/bench/nbody.toy (same float operations, same order). Default n =
// 100000 steps. Prints the energy before and after with 9 decimals, like C's "%.9f".
"use strict";

const PI = 3.141592653589793;
const SOLAR_MASS = 4.0 * PI * PI;
const DAYS_PER_YEAR = 365.24;

function body(x, y, z, vx, vy, vz, mass) {
  return {
    x, y, z,
    vx: vx * DAYS_PER_YEAR, vy: vy * DAYS_PER_YEAR, vz: vz * DAYS_PER_YEAR,
    mass: mass * SOLAR_MASS,
  };
}

const bodies = [
  // the sun: at rest at the origin until offsetMomentum
  { x: 0.0, y: 0.0, z: 0.0, vx: 0.0, vy: 0.0, vz: 0.0, mass: SOLAR_MASS },
  body(4.84143144246472090, -1.16032004402742839, -0.103622044471123109, // jupiter
    1.66007664274403694e-3, 7.69901118419740425e-3, -6.90460016972063023e-5,
    9.54791938424326609e-4),
  body(8.34336671824457987, 4.12479856412430479, -0.403523417114321381, // saturn
    -2.76742510726862411e-3, 4.99852801234917238e-3, 2.30417297573763929e-5,
    2.85885980666130812e-4),
  body(12.8943695621391310, -15.1111514016986312, -0.223307578892655734, // uranus
    2.96460137564761618e-3, 2.37847173959480950e-3, -2.96589568540237556e-5,
    4.36624404335156298e-5),
  body(15.3796971148509165, -25.9193146099879641, 0.179258772950371181, // neptune
    2.68067772490389322e-3, 1.62824170038242295e-3, -9.51592254519715870e-5,
    5.15138902046611451e-5),
];

function offsetMomentum() {
  let px = 0.0;
  let py = 0.0;
  let pz = 0.0;
  for (const b of bodies) {
    px += b.vx * b.mass;
    py += b.vy * b.mass;
    pz += b.vz * b.mass;
  }
  bodies[0].vx = -px / SOLAR_MASS;
  bodies[0].vy = -py / SOLAR_MASS;
  bodies[0].vz = -pz / SOLAR_MASS;
}

function energy() {
  let e = 0.0;
  const nb = bodies.length;
  for (let i = 0; i < nb; i++) {
    const bi = bodies[i];
    e += 0.5 * bi.mass * (bi.vx * bi.vx + bi.vy * bi.vy + bi.vz * bi.vz);
    for (let j = i + 1; j < nb; j++) {
      const bj = bodies[j];
      const dx = bi.x - bj.x;
      const dy = bi.y - bj.y;
      const dz = bi.z - bj.z;
      e -= (bi.mass * bj.mass) / Math.sqrt(dx * dx + dy * dy + dz * dz);
    }
  }
  return e;
}

function advance(dt) {
  const nb = bodies.length;
  for (let i = 0; i < nb; i++) {
    const bi = bodies[i];
    for (let j = i + 1; j < nb; j++) {
      const bj = bodies[j];
      const dx = bi.x - bj.x;
      const dy = bi.y - bj.y;
      const dz = bi.z - bj.z;
      const d2 = dx * dx + dy * dy + dz * dz;
      const mag = dt / (d2 * Math.sqrt(d2));
      let bm = bj.mass * mag;
      bi.vx -= dx * bm;
      bi.vy -= dy * bm;
      bi.vz -= dz * bm;
      bm = bi.mass * mag;
      bj.vx += dx * bm;
      bj.vy += dy * bm;
      bj.vz += dz * bm;
    }
  }
  for (const b of bodies) {
    b.x += dt * b.vx;
    b.y += dt * b.vy;
    b.z += dt * b.vz;
  }
}

const n = process.argv.length > 2 ? parseInt(process.argv[2], 10) : 100000;
offsetMomentum();
console.log(energy().toFixed(9));
for (let k = 0; k < n; k++) {
  advance(0.01);
}
console.log(energy().toFixed(9));
