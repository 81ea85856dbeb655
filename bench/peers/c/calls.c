/* calls.c: s = add(s, i) for i in 0..n, as examples/scripts/bench/calls.toy.
 * Default n = 10000000. `noinline` keeps the call that the benchmark measures
 * (gcc -O2 would otherwise inline `add` and leave a bare addition loop). */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) static long long add(long long a, long long b) { return a + b; }

int main(int argc, char **argv) {
    long long n = argc > 1 ? atoll(argv[1]) : 10000000;
    long long s = 0;
    for (long long i = 0; i < n; i++) s = add(s, i);
    printf("%lld\n", s);
    return 0;
}
