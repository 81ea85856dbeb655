/* fib.c: recursive fib(n), as examples/scripts/bench/fib.toy. Default n = 32. */
#include <stdio.h>
#include <stdlib.h>

static long long fib(long long n) {
    if (n < 2) return n;
    return fib(n - 1) + fib(n - 2);
}

int main(int argc, char **argv) {
    long long n = argc > 1 ? atoll(argv[1]) : 32;
    printf("%lld\n", fib(n));
    return 0;
}
