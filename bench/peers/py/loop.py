# loop.py: s = (s * 31 + i) % 1000003 for i in 0..n, as examples/scripts/bench/loop.toy.
# Default n = 10000000. The loop runs inside a function, where names are fast locals.
import sys


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10000000
    s = 0
    for i in range(n):
        s = (s * 31 + i) % 1000003
    print(s)


main()
