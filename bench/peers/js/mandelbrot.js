// mandelbrot.js: iterations over an n x n grid on [-1.5, 0.5] x [-1, 1], at most 50 per
// point, as examples/scripts/bench/mandelbrot.toy (same float operations, same order).
// Default n = 400.
"use strict";

function mandelbrot(size, maxIter) {
  let total = 0;
  for (let y = 0; y < size; y++) {
    const ci = (2.0 * y) / size - 1.0;
    for (let x = 0; x < size; x++) {
      const cr = (2.0 * x) / size - 1.5;
      let zr = 0.0;
      let zi = 0.0;
      let i = 0;
      while (i < maxIter && zr * zr + zi * zi <= 4.0) {
        const t = zr * zr - zi * zi + cr;
        zi = 2.0 * zr * zi + ci;
        zr = t;
        i += 1;
      }
      total += i;
    }
  }
  return total;
}

const size = process.argv.length > 2 ? parseInt(process.argv[2], 10) : 400;
console.log(String(mandelbrot(size, 50)));
