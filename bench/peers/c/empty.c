/* empty.c: does nothing; bench/run.sh times it as C's process startup. */
int main(void) { return 0; }
