# empty.py: does nothing; bench/run.sh times it as CPython's startup.
