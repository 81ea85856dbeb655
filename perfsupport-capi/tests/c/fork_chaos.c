/* fork_chaos: a parent with two threads registers, profiles and forks at
 * random moments; every child (and maybe a grandchild) checks the state it
 * inherits, profiles itself and writes its own perf map.
 *
 * usage: fork_chaos SEED [FORKS]   (run in a scratch directory)
 *
 * The parent's thread A loops: perf map lines through the trio
 * ("p<pid>::a<N>" on small static buffers), vmprof code ("p<pid>:a<N>"),
 * pushes and pops, CPU burned, now and then a retired id. Its thread B, at
 * random moments, enables or disables vmprof into "prof-<pid>-<k>.prof" and
 * forks (FORKS times, 20 by default). Each child, a copy of thread B:
 * perf_map_after_fork_child (0, or ESTATE when thread A held the map's lock:
 * then it leaves the trio alone), vmprof off, its own code ("c<pid>:..."),
 * map lines ("c<pid>::..."), a profile "prof-<pid>-0.prof" of ~0.1 s of CPU
 * under its own frames, maybe one grandchild forked while it profiles.
 * alarm(20) turns a deadlock in a child into a failure.
 *
 * Output, one write(2) per line (processes share stdout):
 *   seed S / root PID
 *   proc PID parent PPID map RC samples N   (each process, at its end)
 *   forked PID by PPID / exit PID STATUS    (the forker; STATUS 0 is clean)
 *   profile FILE                            (each finished profile)
 *   FAIL [PID] what (last error: ...)      (a failed check)
 *   done FAILURES                           (the root, at its very end)
 * A process exits non-zero when one of its checks failed. The Rust side
 * (tests/fork_chaos.rs) reads the maps and profiles it leaves. */
#include <perfsupport.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* One line on stdout in one write(2): no stdio buffer to be copied by a
 * fork or locked by another thread. */
static void say(const char *format, ...) {
    char line[512];
    va_list args;
    va_start(args, format);
    int n = vsnprintf(line, sizeof line - 1, format, args);
    va_end(args);
    if (n < 0) return;
    if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    const char *at = line;
    while (n > 0) {
        ssize_t w = write(1, at, (size_t)n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        at += w;
        n -= (int)w;
    }
}

static int failures; /* this process's; atomically updated */

static void check(int ok, const char *what) {
    if (!ok) {
        __atomic_add_fetch(&failures, 1, __ATOMIC_SEQ_CST);
        say("FAIL [%d] %s (last error: %s)", (int)getpid(), what, perfsupport_last_error());
    }
}

/* xorshift64*: reproducible from the seed (up to thread scheduling). */
static uint64_t next(uint64_t *state) {
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static uint64_t below(uint64_t *state, uint64_t n) { return next(state) % n; }

static volatile unsigned long sink;

/* Burns `seconds` of this thread's CPU time. */
static void burn(double seconds) {
    struct timespec start, now;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
    do {
        for (int i = 0; i < 20000; i++) sink += (unsigned long)i * 7;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    } while ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 < seconds);
}

static void pause_ms(unsigned ms) {
    struct timespec t = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

/* The "code" the map lines describe. */
static const unsigned char code[64][16] = {{0x90}};

/* Registers vmprof code named `<class>:<func>:<line>:fork_chaos.c`. */
static uintptr_t register_code(const char *class, const char *func, uint32_t line) {
    uintptr_t id = 0;
    check(perfsupport_vmprof_register_code(class, func, line, "fork_chaos.c", &id) == 0 && id > 0,
          "register code");
    return id;
}

static void map_line(int n, const char *name) {
    check(perfsupport_write_perf_map_entry(code[n % 64], sizeof code[0], name) == 0,
          "write a perf map line");
}

static int wait_status(pid_t pid) {
    int status = 0;
    pid_t got;
    while ((got = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
    }
    if (got != pid) return -1;
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 1000 + WTERMSIG(status);
    return -2;
}

/* ---- a child (or grandchild): a copy of the forking thread ---------- */

static void child_main(perfsupport_shadow_stack *stack, pid_t parent, uint64_t rng,
                       int may_fork);

static pid_t fork_child(perfsupport_shadow_stack *stack, uint64_t *rng, int may_fork) {
    uint64_t child_rng = next(rng) | 1;
    pid_t me = getpid();
    pid_t pid = fork();
    if (pid == 0) child_main(stack, me, child_rng, may_fork); /* does not return */
    check(pid > 0, "fork");
    if (pid > 0) say("forked %d by %d", (int)pid, (int)me);
    return pid;
}

static void child_main(perfsupport_shadow_stack *stack, pid_t parent, uint64_t rng,
                       int may_fork) {
    failures = 0;
    alarm(20);
    pid_t me = getpid();
    int map = perfsupport_perf_map_after_fork_child();
    check(map == 0 || map == PERFSUPPORT_ESTATE, "child: perf_map_after_fork_child");
    int use_map = map == 0;
    check(perfsupport_vmprof_is_enabled() == 0, "child: profiling is off");
    check(perfsupport_vmprof_disable(NULL) == PERFSUPPORT_ESTATE,
          "child: disable says not enabled");

    char class[32], name[64];
    snprintf(class, sizeof class, "c%d", (int)me);
    uintptr_t ids[4];
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "w%d", i);
        ids[i] = register_code(class, name, (uint32_t)i + 1);
        if (use_map) {
            snprintf(name, sizeof name, "c%d::w%d", (int)me, i);
            map_line(i, name);
        }
    }
    char path[64];
    snprintf(path, sizeof path, "prof-%d-0.prof", (int)me);
    check(perfsupport_vmprof_enable(path, "chaos-child", 200 + (uint32_t)below(&rng, 800)) == 0,
          "child: enable");
    check(perfsupport_vmprof_is_enabled() != 0, "child: profiling is on");

    int fork_at = may_fork && below(&rng, 3) == 0 ? (int)below(&rng, 10) : -1;
    pid_t grandchild = -1;
    perfsupport_shadow_stack_push(stack, ids[0]);
    for (int slice = 0; slice < 10; slice++) {
        uintptr_t id = ids[1 + below(&rng, 3)];
        perfsupport_shadow_stack_push(stack, id);
        burn(0.01);
        perfsupport_shadow_stack_pop(stack);
        if (slice == fork_at) grandchild = fork_child(stack, &rng, 0);
        if (use_map) {
            snprintf(name, sizeof name, "c%d::s%d", (int)me, slice);
            map_line(4 + slice, name);
        }
    }
    perfsupport_shadow_stack_pop(stack);
    uint64_t samples = 0;
    check(perfsupport_vmprof_disable(&samples) == 0, "child: disable");
    check(samples > 0, "child: the forking thread is sampled");
    say("profile %s", path);
    if (use_map) {
        snprintf(name, sizeof name, "c%d::end", (int)me);
        map_line(63, name);
        perfsupport_perf_map_fini();
    }
    if (grandchild > 0) {
        int status = wait_status(grandchild);
        say("exit %d %d", (int)grandchild, status);
        check(status == 0, "child: the grandchild passed");
    }
    say("proc %d parent %d map %d samples %llu", (int)me, (int)parent, map,
        (unsigned long long)samples);
    _exit(failures != 0);
}

/* ---- the parent -------------------------------------------------------- */

static pid_t root;
static uint64_t seed;
static int forks_wanted = 20;
static int stop;

/* B asks A for a long burst of map lines (burst_wanted), and forks once A
 * has started it (bursting): the child then often finds the map's lock
 * held, the case where perf_map_after_fork_child says ESTATE. */
static int burst_wanted, bursting;

static pid_t children[64];
static int child_count;

static void *thread_a(void *arg) {
    (void)arg;
    uint64_t rng = seed * 2654435761u + 1;
    perfsupport_shadow_stack *stack = NULL;
    check(perfsupport_vmprof_attach_thread(&stack) == 0 && stack, "A: attach");
    if (!stack) return NULL;
    char class[32], func[32], name[64];
    snprintf(class, sizeof class, "p%d", (int)root);
    uintptr_t live[8] = {0};
    for (unsigned n = 0; !__atomic_load_n(&stop, __ATOMIC_SEQ_CST); n++) {
        /* Mostly one line, now and then a burst (forks then often find
         * the map's lock held). */
        unsigned lines = below(&rng, 8) == 0 ? 1 + (unsigned)below(&rng, 32) : 1;
        int burst = __atomic_load_n(&burst_wanted, __ATOMIC_SEQ_CST);
        if (burst) {
            lines = 200;
            __atomic_store_n(&bursting, 1, __ATOMIC_SEQ_CST);
        }
        for (unsigned i = 0; i < lines; i++) {
            snprintf(name, sizeof name, "p%d::a%u.%u", (int)root, n, i);
            map_line((int)(n + i), name);
            if (burst && !__atomic_load_n(&burst_wanted, __ATOMIC_SEQ_CST)) break;
        }
        __atomic_store_n(&bursting, 0, __ATOMIC_SEQ_CST);
        snprintf(func, sizeof func, "a%u", n);
        uintptr_t id = register_code(class, func, n + 1);
        unsigned slot = (unsigned)below(&rng, 8);
        if (live[slot] && below(&rng, 4) == 0) {
            check(perfsupport_vmprof_retire_code(&live[slot], 1) == 0, "A: retire");
        }
        live[slot] = id;
        uintptr_t outer = live[below(&rng, 8)]; /* never a retired id */
        perfsupport_shadow_stack_push(stack, outer ? outer : id);
        perfsupport_shadow_stack_push(stack, id);
        burn(0.0002 * (double)below(&rng, 10));
        perfsupport_shadow_stack_pop(stack);
        perfsupport_shadow_stack_pop(stack);
        if (below(&rng, 50) == 0) pause_ms(1);
    }
    return NULL;
}

static void *thread_b(void *arg) {
    (void)arg;
    uint64_t rng = seed * 40503u + 2;
    perfsupport_shadow_stack *stack = NULL;
    check(perfsupport_vmprof_attach_thread(&stack) == 0 && stack, "B: attach");
    if (!stack) return NULL;
    char class[32];
    snprintf(class, sizeof class, "p%d", (int)root);
    uintptr_t b_fork = register_code(class, "b_fork", 1);
    uintptr_t b_burn = register_code(class, "b_burn", 2);
    int profiles = 0;
    while (child_count < forks_wanted) {
        switch (below(&rng, 10)) {
        case 0:
        case 1:
        case 2:
            if (!perfsupport_vmprof_is_enabled()) {
                char path[64];
                snprintf(path, sizeof path, "prof-%d-%d.prof", (int)root, profiles++);
                check(perfsupport_vmprof_enable(path, "chaos", 100 + (uint32_t)below(&rng, 900)) ==
                          0,
                      "B: enable");
                say("profile %s", path);
            } else {
                check(perfsupport_vmprof_disable(NULL) == 0, "B: disable");
            }
            break;
        case 3:
        case 4: {
            int burst = below(&rng, 3) == 0;
            if (burst) {
                __atomic_store_n(&burst_wanted, 1, __ATOMIC_SEQ_CST);
                while (!__atomic_load_n(&bursting, __ATOMIC_SEQ_CST)) sched_yield();
                burn(0.00005 * (double)below(&rng, 10));
            }
            perfsupport_shadow_stack_push(stack, b_fork);
            pid_t pid = fork_child(stack, &rng, 1);
            perfsupport_shadow_stack_pop(stack);
            if (burst) __atomic_store_n(&burst_wanted, 0, __ATOMIC_SEQ_CST);
            if (pid > 0) children[child_count++] = pid;
            else child_count++; /* counted: the failure is reported */
            break;
        }
        case 5:
        case 6:
            perfsupport_shadow_stack_push(stack, b_burn);
            burn(0.001 * (double)below(&rng, 5));
            perfsupport_shadow_stack_pop(stack);
            break;
        default:
            pause_ms((unsigned)below(&rng, 30));
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: fork_chaos SEED [FORKS]\n");
        return 2;
    }
    seed = strtoull(argv[1], NULL, 0);
    if (argc > 2) forks_wanted = atoi(argv[2]);
    if (forks_wanted < 0 || forks_wanted > 64) forks_wanted = 20;
    root = getpid();
    alarm(100);
    say("seed %llu", (unsigned long long)seed);
    say("root %d", (int)root);
    pthread_t a, b;
    check(pthread_create(&a, NULL, thread_a, NULL) == 0, "start A");
    check(pthread_create(&b, NULL, thread_b, NULL) == 0, "start B");
    pthread_join(b, NULL);
    for (int i = 0; i < child_count; i++) {
        if (children[i] <= 0) continue;
        int status = wait_status(children[i]);
        say("exit %d %d", (int)children[i], status);
        check(status == 0, "a child passed");
    }
    __atomic_store_n(&stop, 1, __ATOMIC_SEQ_CST);
    pthread_join(a, NULL);
    if (perfsupport_vmprof_is_enabled()) {
        check(perfsupport_vmprof_disable(NULL) == 0, "final disable");
    }
    perfsupport_perf_map_fini();
    say("proc %d parent 0 map 0 samples 0", (int)root);
    say("done %d", failures);
    return failures != 0;
}
