# calls.py: s = add(s, i) for i in 0..n, as examples/scripts/bench/calls.toy.
# Default n = 10000000.
import sys


def add(a, b):
    return a + b


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10000000
    s = 0
    for i in range(n):
        s = add(s, i)
    print(s)


main()
