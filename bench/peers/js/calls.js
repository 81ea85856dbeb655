// calls.js: s = add(s, i) for i in 0..n, as examples/scripts/bench/calls.toy.
// Default n = 10000000. The sum stays below 2^53, so doubles are exact.
"use strict";

function add(a, b) {
  return a + b;
}

const n = process.argv.length > 2 ? parseInt(process.argv[2], 10) : 10000000;
let s = 0;
for (let i = 0; i < n; i++) {
  s = add(s, i);
}
console.log(String(s));
