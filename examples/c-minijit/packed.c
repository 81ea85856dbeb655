/* packed: a JIT in C that places its functions back to back, as most JITs
 * do, and tells profilers and debuggers about them through perfsupport's
 * C API (perfsupport.h).
 *
 * It hand-assembles four functions of packed.mj into one mmap'ed arena,
 * each right after the one before, no room in between:
 *   packed::leaf     calls host_probe (a breakpoint for debuggers), then
 *                    the hot loop
 *   packed::inner    spins, then calls leaf
 *   packed::middle   spins, then calls inner
 *   packed::outer    spins, then calls middle
 * All keep frame pointers (push rbp; mov rbp, rsp ... leave; ret) and
 * describe them with PERFSUPPORT_UNWIND_FRAME_POINTER. It registers them
 * one per call, callee first (each new function lands in the room the one
 * before would need for its unwind tables), prints what
 * perfsupport_register_ex reports. x86-64 only (minijit.c shows aarch64).
 * Packed, perf inject's mappings would overlap: perfsupport writes the
 * regions without room header-only, and perf unwinds them by frame
 * pointers (full stacks, because this code keeps them).
 *
 * usage: packed [--rounds N] [--jitdump-dir DIR] [--batch] [--down] [--spaced]
 *               [--gdb] [--replace]
 *   --batch    register all four in one call
 *   --down     register them caller first (each before the one before)
 *   --spaced   lay them out at perfsupport_reserved_region_size strides
 *   --gdb      also PERFSUPPORT_OUTPUT_GDB: debuggers name the functions
 *   --replace  then retire leaf, compile a new one (packed::leaf2)
 *              elsewhere and run it: debuggers see only the new one
 */
#include <perfsupport.h>

#include "emit.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#if defined(__x86_64__)
#define WORK 20000         /* iterations of each loop per call */
#define SOURCE "packed.mj" /* the made-up source file */
#define COUNT 4

static void die(const char *what, int rc) {
    fprintf(stderr, "packed: %s failed (%d): %s\n", what, rc, perfsupport_last_error());
    exit(1);
}

/* ---- Code (with the byte emitter of emit.h) ------------------------- */

// ANCHOR: packed_functions
/* leaf(n, probe): calls probe() if it is not NULL, then sums n..1. */
static size_t emit_leaf(uint8_t *at) {
    emitter e = {at, 0};
    EMIT(&e, 0x55, 0x48, 0x89, 0xe5,             /* push rbp; mov rbp, rsp */
         0x57, 0x56,                             /* push rdi; push rsi */
         0x48, 0x85, 0xf6, 0x74, 0x02,           /* test rsi, rsi; jz +2 */
         0xff, 0xd6,                             /* call rsi */
         0x5e, 0x5f,                             /* pop rsi; pop rdi */
         0x31, 0xc0,                             /* xor eax, eax */
         0x48, 0x01, 0xf8,                       /* loop: add rax, rdi */
         0x48, 0xff, 0xcf,                       /* dec rdi */
         0x75, 0xf8,                             /* jnz loop */
         0xc9, 0xc3);                            /* leave; ret */
    __builtin___clear_cache((char *)at, (char *)at + e.len); /* for fetch (no-op on x86-64) */
    return e.len;
}

/* caller(n, probe): spins n times, then returns callee(n, probe). */
static size_t emit_caller(uint8_t *at, const void *callee) {
    emitter e = {at, 0};
    EMIT(&e, 0x55, 0x48, 0x89, 0xe5,             /* push rbp; mov rbp, rsp */
         0x48, 0x89, 0xf9,                       /* mov rcx, rdi */
         0x48, 0xff, 0xc9, 0x75, 0xfb);          /* loop: dec rcx; jnz loop */
    emit_call(&e, callee);                       /* mov rax, callee; call rax */
    EMIT(&e, 0xc9, 0xc3);                        /* leave; ret */
    __builtin___clear_cache((char *)at, (char *)at + e.len); /* as in emit_leaf */
    return e.len;
}
// ANCHOR_END: packed_functions

/* Where a debugger stops to look at the JIT frames: the leaf calls it. */
__attribute__((noinline)) void host_probe(void) {
    __asm__ __volatile__("" ::: "memory");
}

typedef uint64_t (*jit_fn)(uint64_t n, void (*probe)(void));

/* The host's side of the JIT code. */
__attribute__((noinline)) static uint64_t run_jit(jit_fn f, uint64_t rounds,
                                                  void (*probe)(void)) {
    uint64_t sum = 0;
    for (uint64_t i = 0; i < rounds; i++) sum += f(WORK, probe);
    return sum;
}

int main(int argc, char **argv) {
    uint64_t rounds = 2000;
    const char *jitdump_dir = NULL; /* $JITDUMPDIR, else /tmp */
    int batch = 0, down = 0, spaced = 0, gdb = 0, replace = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
            rounds = strtoull(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--jitdump-dir") && i + 1 < argc) {
            jitdump_dir = argv[++i];
        } else if (!strcmp(argv[i], "--batch")) {
            batch = 1;
        } else if (!strcmp(argv[i], "--down")) {
            down = 1;
        } else if (!strcmp(argv[i], "--spaced")) {
            spaced = 1;
        } else if (!strcmp(argv[i], "--gdb")) {
            gdb = 1;
        } else if (!strcmp(argv[i], "--replace")) {
            replace = 1;
        } else {
            fprintf(stderr, "usage: packed [--rounds N] [--jitdump-dir DIR] [--batch] [--down] "
                            "[--spaced] [--gdb] [--replace]\n");
            return 2;
        }
    }
    if (rounds == 0) rounds = 1;

    uint32_t outputs = PERFSUPPORT_OUTPUT_PERF_MAP | PERFSUPPORT_OUTPUT_JITDUMP;
    if (gdb) outputs |= PERFSUPPORT_OUTPUT_GDB;
    perfsupport_profilers *prof;
    int rc = perfsupport_profilers_open(outputs, jitdump_dir, &prof);
    if (rc) die("perfsupport_profilers_open", rc);

    // ANCHOR: packed_layout
    /* Callee first, each function right after the one before (or at the
     * stride perfsupport_reserved_region_size gives, with --spaced). */
    size_t arena_size = 1 << 16;
    uint8_t *arena = mmap(NULL, arena_size, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (arena == MAP_FAILED) { perror("mmap"); return 1; }
    static const char *const names[COUNT] = {"packed::leaf", "packed::inner", "packed::middle",
                                             "packed::outer"};
    const perfsupport_unwind fp = {.kind = PERFSUPPORT_UNWIND_FRAME_POINTER};
    perfsupport_line lines[COUNT];
    perfsupport_region regions[COUNT];
    size_t at = 0;
    for (int i = 0; i < COUNT; i++) {
        uint8_t *code = arena + at;
        size_t size = i == 0 ? emit_leaf(code) : emit_caller(code, regions[i - 1].code);
        lines[i] = (perfsupport_line){.offset = 0, .file = SOURCE, .line = 3 + 4 * (uint32_t)i};
        regions[i] = (perfsupport_region){.code = code, .size = size, .name = names[i],
                                          .unwind = &fp, .lines = &lines[i], .line_count = 1};
        size_t stride = size;
        if (spaced && (rc = perfsupport_reserved_region_size(size, &fp, &stride)))
            die("perfsupport_reserved_region_size", rc);
        at += stride;
    }
    if (mprotect(arena, arena_size, PROT_READ | PROT_EXEC)) { perror("mprotect"); return 1; }
    // ANCHOR_END: packed_layout

    // ANCHOR: packed_register
    /* One call per function, as a JIT that compiles one at a time does:
     * callee first (each new one lands in the room of the one before), or
     * caller first with --down (each new one's room holds the one before). */
    for (int k = 0; k < COUNT; k++) {
        int i = down ? COUNT - 1 - k : k;
        perfsupport_unwind_fallbacks fb;
        size_t n = batch ? COUNT : 1;
        if (batch) i = 0;
        if ((rc = perfsupport_register_ex(prof, &regions[i], n, &fb)))
            die("perfsupport_register_ex", rc);
        printf("packed: registered %-14s at arena+%-3zu (%zu bytes): header_only=%zu rewritten=%zu\n",
               batch ? "all four" : names[i], (size_t)((const uint8_t *)regions[i].code - arena),
               batch ? at : regions[i].size, fb.header_only, fb.rewritten);
        if (batch) break;
    }
    // ANCHOR_END: packed_register

    uint64_t sum = run_jit((jit_fn)(uintptr_t)regions[COUNT - 1].code, rounds, host_probe);
    printf("packed: ran outer %llu times (%llu)\n", (unsigned long long)rounds,
           (unsigned long long)sum);

    if (replace) {
        // ANCHOR: packed_replace
        /* The leaf dies: say so before its memory could be reused, then
         * compile its replacement elsewhere and run it. */
        perfsupport_code_range dead = {.start = (uintptr_t)regions[0].code,
                                       .size = regions[0].size};
        if ((rc = perfsupport_retire(prof, &dead, 1))) die("perfsupport_retire", rc);
        uint8_t *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                             -1, 0);
        if (page == MAP_FAILED) { perror("mmap"); return 1; }
        size_t size = emit_leaf(page);
        if (mprotect(page, 4096, PROT_READ | PROT_EXEC)) { perror("mprotect"); return 1; }
        perfsupport_line line = {.offset = 0, .file = SOURCE, .line = 19};
        perfsupport_region leaf2 = {.code = page, .size = size, .name = "packed::leaf2",
                                    .unwind = &fp, .lines = &line, .line_count = 1};
        if ((rc = perfsupport_register(prof, &leaf2, 1))) die("perfsupport_register", rc);
        // ANCHOR_END: packed_replace
        printf("packed: retired packed::leaf, registered packed::leaf2 on a page of its own\n");
        run_jit((jit_fn)(uintptr_t)leaf2.code, 1, host_probe);
    }
    if ((rc = perfsupport_profilers_finish(prof))) die("perfsupport_profilers_finish", rc);
    return 0;
}
#else
/* Elsewhere it builds, and says why it does not run. */
int main(void) {
    fprintf(stderr, "packed: this example emits x86-64 code only (its four functions are "
                    "hand-assembled x86-64 bytes; minijit.c and elfjit.c also emit aarch64)\n");
    return 2;
}
#endif
