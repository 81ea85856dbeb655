# fib.py: recursive fib(n), as examples/scripts/bench/fib.toy. Default n = 32.
import sys


def fib(n):
    if n < 2:
        return n
    return fib(n - 1) + fib(n - 2)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 32
    print(fib(n))


main()
