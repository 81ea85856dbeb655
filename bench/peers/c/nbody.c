/* nbody.c: the 5-body simulation of the benchmarks game (the sun and the four gas giants),
 * as examples/scripts/bench/nbody.toy (same float operations, same order). Default n =
 * 100000 steps. Prints the energy before and after with "%.9f". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define PI 3.141592653589793
#define SOLAR_MASS (4.0 * PI * PI)
#define DAYS_PER_YEAR 365.24
#define NB 5

struct body {
    double x, y, z, vx, vy, vz, mass;
};

static void offset_momentum(struct body *b) {
    double px = 0.0, py = 0.0, pz = 0.0;
    for (int i = 0; i < NB; i++) {
        px += b[i].vx * b[i].mass;
        py += b[i].vy * b[i].mass;
        pz += b[i].vz * b[i].mass;
    }
    b[0].vx = -px / SOLAR_MASS;
    b[0].vy = -py / SOLAR_MASS;
    b[0].vz = -pz / SOLAR_MASS;
}

static double energy(const struct body *b) {
    double e = 0.0;
    for (int i = 0; i < NB; i++) {
        e += 0.5 * b[i].mass * (b[i].vx * b[i].vx + b[i].vy * b[i].vy + b[i].vz * b[i].vz);
        for (int j = i + 1; j < NB; j++) {
            double dx = b[i].x - b[j].x;
            double dy = b[i].y - b[j].y;
            double dz = b[i].z - b[j].z;
            e -= (b[i].mass * b[j].mass) / sqrt(dx * dx + dy * dy + dz * dz);
        }
    }
    return e;
}

static void advance(struct body *b, double dt) {
    for (int i = 0; i < NB; i++) {
        for (int j = i + 1; j < NB; j++) {
            double dx = b[i].x - b[j].x;
            double dy = b[i].y - b[j].y;
            double dz = b[i].z - b[j].z;
            double d2 = dx * dx + dy * dy + dz * dz;
            double mag = dt / (d2 * sqrt(d2));
            double bm = b[j].mass * mag;
            b[i].vx -= dx * bm;
            b[i].vy -= dy * bm;
            b[i].vz -= dz * bm;
            bm = b[i].mass * mag;
            b[j].vx += dx * bm;
            b[j].vy += dy * bm;
            b[j].vz += dz * bm;
        }
    }
    for (int i = 0; i < NB; i++) {
        b[i].x += dt * b[i].vx;
        b[i].y += dt * b[i].vy;
        b[i].z += dt * b[i].vz;
    }
}

int main(int argc, char **argv) {
    long long n = argc > 1 ? atoll(argv[1]) : 100000;
    struct body bodies[NB] = {
        /* sun */
        {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, SOLAR_MASS},
        /* jupiter */
        {4.84143144246472090, -1.16032004402742839, -0.103622044471123109,
         1.66007664274403694e-3 * DAYS_PER_YEAR, 7.69901118419740425e-3 * DAYS_PER_YEAR,
         -6.90460016972063023e-5 * DAYS_PER_YEAR, 9.54791938424326609e-4 * SOLAR_MASS},
        /* saturn */
        {8.34336671824457987, 4.12479856412430479, -0.403523417114321381,
         -2.76742510726862411e-3 * DAYS_PER_YEAR, 4.99852801234917238e-3 * DAYS_PER_YEAR,
         2.30417297573763929e-5 * DAYS_PER_YEAR, 2.85885980666130812e-4 * SOLAR_MASS},
        /* uranus */
        {12.8943695621391310, -15.1111514016986312, -0.223307578892655734,
         2.96460137564761618e-3 * DAYS_PER_YEAR, 2.37847173959480950e-3 * DAYS_PER_YEAR,
         -2.96589568540237556e-5 * DAYS_PER_YEAR, 4.36624404335156298e-5 * SOLAR_MASS},
        /* neptune */
        {15.3796971148509165, -25.9193146099879641, 0.179258772950371181,
         2.68067772490389322e-3 * DAYS_PER_YEAR, 1.62824170038242295e-3 * DAYS_PER_YEAR,
         -9.51592254519715870e-5 * DAYS_PER_YEAR, 5.15138902046611451e-5 * SOLAR_MASS},
    };
    offset_momentum(bodies);
    printf("%.9f\n", energy(bodies));
    for (long long k = 0; k < n; k++) advance(bodies, 0.01);
    printf("%.9f\n", energy(bodies));
    return 0;
}
