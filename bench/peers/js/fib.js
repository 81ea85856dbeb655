// fib.js: recursive fib(n), as examples/scripts/bench/fib.toy. Default n = 32.
"use strict";

function fib(n) {
  if (n < 2) return n;
  return fib(n - 1) + fib(n - 2);
}

const n = process.argv.length > 2 ? parseInt(process.argv[2], 10) : 32;
console.log(String(fib(n)));
