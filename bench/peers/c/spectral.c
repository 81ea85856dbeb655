/* spectral.c: the spectral norm of the infinite matrix A(i, j) = 1 / ((i+j)(i+j+1)/2 + i + 1),
 * 10 power iterations, as examples/scripts/bench/spectral.toy (same float operations, same
 * order). Default n = 250. Prints the norm with "%.9f". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static double eval_a(long long i, long long j) {
    return 1.0 / (double)((i + j) * (i + j + 1) / 2 + i + 1);
}

static void a_times_u(const double *u, double *v, long long n) {
    for (long long i = 0; i < n; i++) {
        double s = 0.0;
        for (long long j = 0; j < n; j++) s += eval_a(i, j) * u[j];
        v[i] = s;
    }
}

static void at_times_u(const double *u, double *v, long long n) {
    for (long long i = 0; i < n; i++) {
        double s = 0.0;
        for (long long j = 0; j < n; j++) s += eval_a(j, i) * u[j];
        v[i] = s;
    }
}

static void ata_times_u(const double *u, double *v, double *tmp, long long n) {
    a_times_u(u, tmp, n);
    at_times_u(tmp, v, n);
}

int main(int argc, char **argv) {
    long long n = argc > 1 ? atoll(argv[1]) : 250;
    if (n < 0) n = 0;
    double *u = malloc(sizeof(double) * (size_t)(n + 1));
    double *v = malloc(sizeof(double) * (size_t)(n + 1));
    double *tmp = malloc(sizeof(double) * (size_t)(n + 1));
    if (!u || !v || !tmp) return 1;
    for (long long i = 0; i < n; i++) { u[i] = 1.0; v[i] = 0.0; tmp[i] = 0.0; }
    for (int k = 0; k < 10; k++) {
        ata_times_u(u, v, tmp, n);
        ata_times_u(v, u, tmp, n);
    }
    double vbv = 0.0, vv = 0.0;
    for (long long i = 0; i < n; i++) {
        vbv += u[i] * v[i];
        vv += v[i] * v[i];
    }
    printf("%.9f\n", sqrt(vbv / vv));
    free(u);
    free(v);
    free(tmp);
    return 0;
}
