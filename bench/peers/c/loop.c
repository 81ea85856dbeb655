/* loop.c: s = (s * 31 + i) % 1000003 for i in 0..n, as examples/scripts/bench/loop.toy.
 * Default n = 10000000. */
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    long long n = argc > 1 ? atoll(argv[1]) : 10000000;
    long long s = 0;
    for (long long i = 0; i < n; i++) s = (s * 31 + i) % 1000003;
    printf("%lld\n", s);
    return 0;
}
