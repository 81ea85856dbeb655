// spectral.js: the spectral norm of the infinite matrix A(i, j), 10 power iterations, as
// examples/scripts/bench/spectral.toy (same float operations, same order). Default n = 250.
// (i+j)(i+j+1) is even, so `/ 2` is exact and equals the Toy program's int division.
// Prints the norm with 9 decimals, like C's "%.9f".
"use strict";

function evalA(i, j) {
  return 1.0 / (((i + j) * (i + j + 1)) / 2 + i + 1);
}

function aTimesU(u, v, n) {
  for (let i = 0; i < n; i++) {
    let s = 0.0;
    for (let j = 0; j < n; j++) s += evalA(i, j) * u[j];
    v[i] = s;
  }
}

function atTimesU(u, v, n) {
  for (let i = 0; i < n; i++) {
    let s = 0.0;
    for (let j = 0; j < n; j++) s += evalA(j, i) * u[j];
    v[i] = s;
  }
}

function ataTimesU(u, v, tmp, n) {
  aTimesU(u, tmp, n);
  atTimesU(tmp, v, n);
}

const n = process.argv.length > 2 ? parseInt(process.argv[2], 10) : 250;
const u = new Float64Array(n).fill(1.0);
const v = new Float64Array(n);
const tmp = new Float64Array(n);
for (let k = 0; k < 10; k++) {
  ataTimesU(u, v, tmp, n);
  ataTimesU(v, u, tmp, n);
}
let vbv = 0.0;
let vv = 0.0;
for (let i = 0; i < n; i++) {
  vbv += u[i] * v[i];
  vv += v[i] * v[i];
}
console.log(Math.sqrt(vbv / vv).toFixed(9));
