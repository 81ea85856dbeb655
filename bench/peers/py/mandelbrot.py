# mandelbrot.py: iterations over an n x n grid on [-1.5, 0.5] x [-1, 1], at most 50 per
# point, as examples/scripts/bench/mandelbrot.toy (same float operations, same order).
# Default n = 400.
import sys


def mandelbrot(size, max_iter):
    total = 0
    for y in range(size):
        ci = 2.0 * float(y) / float(size) - 1.0
        for x in range(size):
            cr = 2.0 * float(x) / float(size) - 1.5
            zr = 0.0
            zi = 0.0
            i = 0
            while i < max_iter and zr * zr + zi * zi <= 4.0:
                t = zr * zr - zi * zi + cr
                zi = 2.0 * zr * zi + ci
                zr = t
                i += 1
            total += i
    return total


def main():
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    print(mandelbrot(size, 50))


main()
