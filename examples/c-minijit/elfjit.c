/* elfjit: a tiny x86-64 and aarch64 JIT in C whose code every native tool
 * sees, with no profiler-specific call at all.
 *
 * It assembles the three functions of minijit.mj (as minijit.c does) into
 * code memory from perfsupport's code-file API: the chunk is read-write
 * while the code is written, then published: written into a new ELF file
 * (.text, .symtab with the names below, .eh_frame from the unwind
 * descriptions, a build-id) and mapped read+execute from it, at the same
 * address. perf (no perf map, no jitdump, no `perf inject`), eu-stack,
 * bpftrace, samply and fleet profilers built on the OpenTelemetry eBPF
 * profiler read that file as they read any shared library.
 *
 *   elfjit::outer   frame pointer (push rbp; mov rbp, rsp; push rbx /
 *                   stp x29, x30, [sp, #-16]!; mov x29, sp; str x19)
 *   elfjit::middle  frame pointer
 *   elfjit::leaf    NO frame pointer (sub rsp, 24 / sub sp, sp, #32),
 *                   described by CFI rows
 *
 * With --generations G it compiles the functions G times, each time into
 * a new chunk, runs a share of the rounds and frees the chunk: dead code
 * is unmapped, and code placed again at its addresses comes from a new
 * file, so every sample is named by the code that ran.
 *
 * usage: elfjit [--rounds N] [--generations G] [--dir DIR]
 */
#include <perfsupport.h>

#include "emit.h"
#if defined(__aarch64__)
#include "emit_a64.h"
#endif

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WORK 20000          /* iterations of each hot loop per call */
#define SOURCE "minijit.mj" /* the made-up source file */
#define CODE_SIZE 512       /* room for the three functions */

static void die(const char *what, int rc) {
    fprintf(stderr, "elfjit: %s failed (%d): %s\n", what, rc, perfsupport_last_error());
    exit(1);
}

typedef struct {
    const char *name;
    size_t offset; /* from the chunk's code address */
    size_t size;
    perfsupport_line lines[4];
    size_t line_count;
} function;

static void line_at(function *f, emitter *e, uint32_t line) {
    f->lines[f->line_count++] = (perfsupport_line){
        .offset = (uint32_t)(e->len - f->offset), .file = SOURCE, .line = line, .column = 0};
}

#if defined(__x86_64__)
/* leaf(n): no frame pointer. */
static void emit_leaf(function *f, emitter *e) {
    line_at(f, e, 3);
    EMIT(e, 0x48, 0x83, 0xec, 0x18);             /* sub rsp, 24 */
    line_at(f, e, 4);
    EMIT(e, 0x31, 0xc0);                         /* xor eax, eax */
    line_at(f, e, 5);
    EMIT(e, 0x48, 0x01, 0xf8,                    /* loop: add rax, rdi */
         0x48, 0xff, 0xcf,                       /* dec rdi */
         0x75, 0xf8);                            /* jnz loop */
    line_at(f, e, 6);
    EMIT(e, 0x48, 0x83, 0xc4, 0x18,              /* add rsp, 24 */
         0xc3);                                  /* ret */
}

/* middle(n): frame pointer; spins n times, then returns leaf(n). */
static void emit_middle(function *f, emitter *e, uintptr_t leaf) {
    line_at(f, e, 8);
    EMIT(e, 0x55, 0x48, 0x89, 0xe5);             /* push rbp; mov rbp, rsp */
    line_at(f, e, 9);
    EMIT(e, 0x48, 0x89, 0xfe,                    /* mov rsi, rdi */
         0x48, 0xff, 0xce,                       /* loop: dec rsi */
         0x75, 0xfb);                            /* jnz loop */
    line_at(f, e, 10);
    emit_call(e, (const void *)leaf);
    EMIT(e, 0x5d, 0xc3);                         /* pop rbp; ret */
}

/* outer(rounds): frame pointer; calls middle(WORK) `rounds` times. */
static void emit_outer(function *f, emitter *e, uintptr_t middle) {
    line_at(f, e, 12);
    EMIT(e, 0x55, 0x48, 0x89, 0xe5,              /* push rbp; mov rbp, rsp */
         0x53,                                   /* push rbx */
         0x48, 0x83, 0xec, 0x08);                /* sub rsp, 8 (align) */
    EMIT(e, 0x48, 0x89, 0xfb);                   /* mov rbx, rdi */
    line_at(f, e, 13);
    size_t loop = e->len;
    EMIT(e, 0x48, 0xbf);                         /* loop: mov rdi, WORK */
    emit_u64(e, WORK);
    emit_call(e, (const void *)middle);
    EMIT(e, 0x48, 0xff, 0xcb);                   /* dec rbx */
    EMIT(e, 0x75, (uint8_t)(loop - (e->len + 2))); /* jnz loop */
    line_at(f, e, 14);
    EMIT(e, 0x48, 0x83, 0xc4, 0x08,              /* add rsp, 8 */
         0x5b, 0x5d, 0xc3);                      /* pop rbx; pop rbp; ret */
}
#elif defined(__aarch64__)
/* leaf(n): no frame pointer, and x30 (the return address) never leaves
 * the link register. */
static void emit_leaf(function *f, emitter *e) {
    line_at(f, e, 3);
    a64(e, a64_sub_imm(A64_SP, A64_SP, 32));     /* sub sp, sp, #32 */
    line_at(f, e, 4);
    a64(e, a64_mov(1, 0));                       /* mov x1, x0 */
    a64(e, a64_movz(0, 0, 0));                   /* mov x0, #0 */
    line_at(f, e, 5);
    size_t loop = e->len;
    a64(e, a64_add_lsl(0, 0, 1, 0));             /* loop: add x0, x0, x1 */
    a64(e, a64_subs_imm(1, 1, 1));               /* subs x1, x1, #1 */
    a64_b_cond_to(e, A64_NE, loop);              /* b.ne loop */
    line_at(f, e, 6);
    a64(e, a64_add_imm(A64_SP, A64_SP, 32));     /* add sp, sp, #32 */
    a64(e, a64_ret());                           /* ret */
}

/* middle(n): frame pointer; spins n times, then returns leaf(n). */
static void emit_middle(function *f, emitter *e, uintptr_t leaf) {
    line_at(f, e, 8);
    a64(e, a64_stp_pre(A64_X29, A64_X30, A64_SP, -16)); /* stp x29, x30, [sp, #-16]! */
    a64(e, a64_add_imm(A64_X29, A64_SP, 0));     /* mov x29, sp */
    line_at(f, e, 9);
    a64(e, a64_mov(1, 0));                       /* mov x1, x0 */
    size_t loop = e->len;
    a64(e, a64_subs_imm(1, 1, 1));               /* loop: subs x1, x1, #1 */
    a64_b_cond_to(e, A64_NE, loop);              /* b.ne loop */
    line_at(f, e, 10);
    a64_call(e, (const void *)leaf);             /* mov x16, leaf; blr x16 */
    a64(e, a64_ldp_post(A64_X29, A64_X30, A64_SP, 16)); /* ldp x29, x30, [sp], #16 */
    a64(e, a64_ret());                           /* ret */
}

/* outer(rounds): frame pointer; calls middle(WORK) `rounds` times, the
 * count in x19 (callee-saved), saved below the frame record. */
static void emit_outer(function *f, emitter *e, uintptr_t middle) {
    line_at(f, e, 12);
    a64(e, a64_stp_pre(A64_X29, A64_X30, A64_SP, -16)); /* stp x29, x30, [sp, #-16]! */
    a64(e, a64_add_imm(A64_X29, A64_SP, 0));     /* mov x29, sp */
    a64(e, a64_str_pre(19, A64_SP, -16));        /* str x19, [sp, #-16]! */
    a64(e, a64_mov(19, 0));                      /* mov x19, x0 */
    line_at(f, e, 13);
    size_t loop = e->len;
    a64(e, a64_movz(0, WORK, 0));                /* loop: mov x0, #WORK */
    a64_call(e, (const void *)middle);           /* mov x16, middle; blr x16 */
    a64(e, a64_subs_imm(19, 19, 1));             /* subs x19, x19, #1 */
    a64_b_cond_to(e, A64_NE, loop);              /* b.ne loop */
    line_at(f, e, 14);
    a64(e, a64_ldr_post(19, A64_SP, 16));        /* ldr x19, [sp], #16 */
    a64(e, a64_ldp_post(A64_X29, A64_X30, A64_SP, 16)); /* ldp x29, x30, [sp], #16 */
    a64(e, a64_ret());                           /* ret */
}
#else
#error "elfjit emits x86-64 or aarch64 code only"
#endif

/* What the host C code runs. */
__attribute__((noinline)) static void run_jit(void (*outer)(uint64_t), uint64_t rounds) {
    outer(rounds);
    __asm__ volatile("" ::: "memory"); /* not a tail call: keep this frame */
}

int main(int argc, char **argv) {
    uint64_t rounds = 2000, generations = 1;
    const char *dir = ".";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
            rounds = strtoull(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--generations") && i + 1 < argc) {
            generations = strtoull(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--dir") && i + 1 < argc) {
            dir = argv[++i];
        } else {
            fprintf(stderr, "usage: elfjit [--rounds N] [--generations G] [--dir DIR]\n");
            return 2;
        }
    }
    if (generations == 0) generations = 1;
    if (rounds < generations) rounds = generations;

    // ANCHOR: open
    /* 1. The directory of this process's code files: DIR/elfjit-PID/. */
    perfsupport_code_files *files;
    int rc = perfsupport_code_files_open(dir, "elfjit", &files);
    if (rc) die("perfsupport_code_files_open", rc);
    // ANCHOR_END: open

    for (uint64_t g = 0; g < generations; g++) {
        // ANCHOR: emit
        /* 2. A chunk, and the code emitted for the address it runs at. */
        perfsupport_code_chunk *chunk;
        if ((rc = perfsupport_code_chunk_alloc(files, CODE_SIZE, 3, &chunk)))
            die("perfsupport_code_chunk_alloc", rc);
        uintptr_t at = (uintptr_t)perfsupport_code_chunk_address(chunk);
        uint8_t buffer[CODE_SIZE];
        emitter e = {buffer, 0};
        function fs[3] = {{.name = "elfjit::leaf"}, {.name = "elfjit::middle"},
                          {.name = "elfjit::outer"}};
        for (int i = 0; i < 3; i++) {
            e.len = (e.len + 15) & ~(size_t)15;
            fs[i].offset = e.len;
            if (i == 0) emit_leaf(&fs[i], &e);
            if (i == 1) emit_middle(&fs[i], &e, at + fs[0].offset);
            if (i == 2) emit_outer(&fs[i], &e, at + fs[1].offset);
            fs[i].size = e.len - fs[i].offset;
        }
        /* The library copies the code into the chunk and publish maps it
         * from a file: the kernel makes such mappings visible to
         * instruction fetch, so no __builtin___clear_cache here. */
        if ((rc = perfsupport_code_chunk_write(chunk, 0, buffer, e.len)))
            die("perfsupport_code_chunk_write", rc);
        // ANCHOR_END: emit

        // ANCHOR: publish
        /* 3. Publish: the file is written whole, then mapped read+execute
         *    over the chunk. leaf has no frame pointer: its CFI rows say
         *    where its caller's frame is (CFA = rsp + 32 after `sub rsp,
         *    24`, rsp + 8 at the `ret`; aarch64: sp + 32 after `sub sp, sp,
         *    #32`, sp + 0 at the `ret`). */
        perfsupport_cfi_row leaf_rows[2] = {
            {.offset = 4, .cfa_register = STACK_POINTER, .cfa_offset = 32},
            {.offset = (uint32_t)(fs[0].size - RET_SIZE), .cfa_register = STACK_POINTER,
             .cfa_offset = ENTRY_CFA_OFFSET},
        };
        perfsupport_unwind leaf_cfi = {
            .kind = PERFSUPPORT_UNWIND_ROWS, .rows = leaf_rows, .row_count = 2};
        perfsupport_unwind frame_pointer = {.kind = PERFSUPPORT_UNWIND_FRAME_POINTER};
        perfsupport_region regions[3];
        for (int i = 0; i < 3; i++) {
            regions[i] = (perfsupport_region){
                .code = (const void *)(at + fs[i].offset),
                .size = fs[i].size,
                .name = fs[i].name,
                .unwind = i == 0 ? &leaf_cfi : &frame_pointer,
                .lines = fs[i].lines,
                .line_count = fs[i].line_count,
            };
        }
        if ((rc = perfsupport_code_chunk_publish(chunk, files, regions, 3)))
            die("perfsupport_code_chunk_publish", rc);
        // ANCHOR_END: publish

        // ANCHOR: run
        /* 4. Run it; when it is dead, free the chunk: unmapped. */
        uint64_t share = rounds / generations + (g < rounds % generations);
        run_jit((void (*)(uint64_t))(at + fs[2].offset), share);
        if (g + 1 == generations)
            printf("elfjit: ran outer(%llu) in %llu generations; last at %p; files in %s\n",
                   (unsigned long long)rounds, (unsigned long long)generations, (void *)at,
                   perfsupport_code_files_dir(files));
        if ((rc = perfsupport_code_chunk_free(chunk))) die("perfsupport_code_chunk_free", rc);
        // ANCHOR_END: run
    }
    if ((rc = perfsupport_code_files_close(files))) die("perfsupport_code_files_close", rc);
    return 0;
}
