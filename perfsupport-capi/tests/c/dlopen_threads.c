/* dlopen_threads: libperfsupport.so loaded with dlopen while other threads
 * already run, and SIGPROF at a high rate on all of them.
 *
 * The bystander threads exist before dlopen and never call perfsupport, so
 * glibc has not allocated the library's thread-local storage for them;
 * they spend their time inside malloc. If the SIGPROF handler touched that
 * storage on a bystander, glibc would allocate it with malloc inside the
 * signal handler, interrupting malloc: a deadlock or a corrupt heap. The
 * handler's gate admits only attached threads, so this program finishes.
 *
 * usage: dlopen_threads LIBPERFSUPPORT.so PROFILE */
#include <perfsupport.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define BYSTANDERS 2

static atomic_int stop;

static void *bystander(void *arg) {
    (void)arg;
    void *blocks[64] = {0};
    unsigned i = 0;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        free(blocks[i % 64]);
        blocks[i % 64] = malloc(16 + (i * 37) % 4000);
        i++;
    }
    for (int j = 0; j < 64; j++) free(blocks[j]);
    return NULL;
}

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

#define LOAD(name) \
    __typeof__(&name) p_##name = (__typeof__(&name))dlsym(lib, #name); \
    if (!p_##name) { fprintf(stderr, "dlsym %s: %s\n", #name, dlerror()); return 1; }

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: dlopen_threads LIB PROFILE\n"); return 2; }
    pthread_t threads[BYSTANDERS];
    for (int i = 0; i < BYSTANDERS; i++) pthread_create(&threads[i], NULL, bystander, NULL);

    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
    LOAD(perfsupport_vmprof_attach_thread);
    LOAD(perfsupport_vmprof_register_code);
    LOAD(perfsupport_vmprof_enable);
    LOAD(perfsupport_vmprof_disable);
    LOAD(perfsupport_last_error);

    perfsupport_shadow_stack *stack;
    uintptr_t id;
    if (p_perfsupport_vmprof_attach_thread(&stack) ||
        p_perfsupport_vmprof_register_code("dl", "spin", 1, "dlopen_threads.c", &id) ||
        p_perfsupport_vmprof_enable(argv[2], "dlopen_threads", 50)) {
        fprintf(stderr, "setup failed: %s\n", p_perfsupport_last_error());
        return 1;
    }
    perfsupport_shadow_stack_push(stack, id);
    double end = cpu_seconds() + 0.2;
    volatile unsigned long x = 1;
    while (cpu_seconds() < end) x = x * 6364136223846793005UL + 1;
    perfsupport_shadow_stack_pop(stack);
    uint64_t samples = 0;
    if (p_perfsupport_vmprof_disable(&samples)) {
        fprintf(stderr, "disable failed: %s\n", p_perfsupport_last_error());
        return 1;
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < BYSTANDERS; i++) pthread_join(threads[i], NULL);
    printf("samples=%llu id=%llu\n", (unsigned long long)samples, (unsigned long long)id);
    return 0;
}
