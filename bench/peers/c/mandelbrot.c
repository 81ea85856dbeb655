/* mandelbrot.c: iterations over an n x n grid on [-1.5, 0.5] x [-1, 1], at most 50 per
 * point, as examples/scripts/bench/mandelbrot.toy (same float operations, same order).
 * Default n = 400. */
#include <stdio.h>
#include <stdlib.h>

static long long mandelbrot(long long size, long long max_iter) {
    long long total = 0;
    for (long long y = 0; y < size; y++) {
        double ci = 2.0 * (double)y / (double)size - 1.0;
        for (long long x = 0; x < size; x++) {
            double cr = 2.0 * (double)x / (double)size - 1.5;
            double zr = 0.0, zi = 0.0;
            long long i = 0;
            while (i < max_iter && zr * zr + zi * zi <= 4.0) {
                double t = zr * zr - zi * zi + cr;
                zi = 2.0 * zr * zi + ci;
                zr = t;
                i += 1;
            }
            total += i;
        }
    }
    return total;
}

int main(int argc, char **argv) {
    long long size = argc > 1 ? atoll(argv[1]) : 400;
    printf("%lld\n", mandelbrot(size, 50));
    return 0;
}
