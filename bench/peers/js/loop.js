// loop.js: s = (s * 31 + i) % 1000003 for i in 0..n, as examples/scripts/bench/loop.toy.
// Default n = 10000000. JS numbers are doubles; every value here stays far below 2^53.
"use strict";

const n = process.argv.length > 2 ? parseInt(process.argv[2], 10) : 10000000;
let s = 0;
for (let i = 0; i < n; i++) {
  s = (s * 31 + i) % 1000003;
}
console.log(String(s));
