// empty.js: does nothing; bench/run.sh times it as node's startup.
