# spectral.py: the spectral norm of the infinite matrix A(i, j), 10 power iterations, as
# examples/scripts/bench/spectral.toy (same float operations, same order). Default n = 250.
# Prints the norm with "%.9f".
import math
import sys


def eval_a(i, j):
    return 1.0 / float((i + j) * (i + j + 1) // 2 + i + 1)


def a_times_u(u, v, n):
    for i in range(n):
        s = 0.0
        for j in range(n):
            s += eval_a(i, j) * u[j]
        v[i] = s


def at_times_u(u, v, n):
    for i in range(n):
        s = 0.0
        for j in range(n):
            s += eval_a(j, i) * u[j]
        v[i] = s


def ata_times_u(u, v, tmp, n):
    a_times_u(u, tmp, n)
    at_times_u(tmp, v, n)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 250
    u = [1.0] * n
    v = [0.0] * n
    tmp = [0.0] * n
    for _ in range(10):
        ata_times_u(u, v, tmp, n)
        ata_times_u(v, u, tmp, n)
    vbv = 0.0
    vv = 0.0
    for i in range(n):
        vbv += u[i] * v[i]
        vv += v[i] * v[i]
    print("%.9f" % math.sqrt(vbv / vv))


main()
