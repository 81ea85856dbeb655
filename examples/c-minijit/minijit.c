/* minijit: a tiny x86-64 and aarch64 JIT in C that tells profilers about
 * its code through perfsupport's C API only (perfsupport.h).
 *
 * It hand-assembles three functions of minijit.mj into mmap'ed memory:
 *   minijit::outer   frame pointer (push rbp; mov rbp, rsp; push rbx /
 *                    stp x29, x30, [sp, #-16]!; mov x29, sp; str x19)
 *   minijit::middle  frame pointer
 *   minijit::leaf    NO frame pointer (sub rsp, 24 / sub sp, sp, #32),
 *                    described by CFI rows
 * registers them (perf map, jitdump with line tables and unwind info),
 * optionally records a vmprof profile whose shadow stack the generated
 * code pushes and pops itself, and runs outer(rounds).
 *
 * usage: minijit [--rounds N] [--jitdump-dir DIR] [--no-cfi]
 *                [--vmprof FILE] [--perf-map-only]
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
#include <sys/mman.h>

#define WORK 20000          /* iterations of each hot loop per call */
#define SOURCE "minijit.mj" /* the made-up source file */

static void die(const char *what, int rc) {
    fprintf(stderr, "minijit: %s failed (%d): %s\n", what, rc, perfsupport_last_error());
    exit(1);
}

// ANCHOR: shadow_push
#if defined(__x86_64__)
/* The shadow stack push in machine code (clobbers rcx, rdx):
 *   mov rcx, stack; mov rdx, [rcx]; cmp rdx, CAPACITY; jae 1f
 *   mov qword [rcx + 8 + 8*rdx], id          ; the id first ...
 *   1: inc rdx; mov [rcx], rdx               ; ... then the depth */
static void emit_shadow_push(emitter *e, perfsupport_shadow_stack *stack, uintptr_t id) {
    EMIT(e, 0x48, 0xb9);
    emit_u64(e, (uint64_t)(uintptr_t)stack);
    EMIT(e, 0x48, 0x8b, 0x11);
    EMIT(e, 0x48, 0x81, 0xfa);
    emit_u32(e, PERFSUPPORT_SHADOW_STACK_CAPACITY);
    EMIT(e, 0x73, 0x09);
    EMIT(e, 0x48, 0xc7, 0x44, 0xd1, 0x08);
    emit_u32(e, (uint32_t)id);
    EMIT(e, 0x48, 0xff, 0xc2);
    EMIT(e, 0x48, 0x89, 0x11);
}

/* The pop: mov rcx, stack; dec qword [rcx] */
static void emit_shadow_pop(emitter *e, perfsupport_shadow_stack *stack) {
    EMIT(e, 0x48, 0xb9);
    emit_u64(e, (uint64_t)(uintptr_t)stack);
    EMIT(e, 0x48, 0xff, 0x09);
}
#elif defined(__aarch64__)
/* The same on aarch64 (clobbers x9-x12, caller-saved scratch registers):
 *   mov x9, stack; ldr x10, [x9]; cmp x10, #CAPACITY; b.hs 1f
 *   mov x11, id; add x12, x9, x10, lsl #3; str x11, [x12, #8] ; the id first ...
 *   1: add x10, x10, #1; str x10, [x9]                        ; ... then the depth */
static void emit_shadow_push(emitter *e, perfsupport_shadow_stack *stack, uintptr_t id) {
    a64_mov_imm64(e, 9, (uint64_t)(uintptr_t)stack);
    a64(e, a64_ldr(10, 9, 0));
    a64(e, a64_subs_imm(A64_XZR, 10, PERFSUPPORT_SHADOW_STACK_CAPACITY));
    a64(e, a64_b_cond(A64_HS, 7));               /* over the 6 that store the id */
    a64_mov_imm64(e, 11, id);
    a64(e, a64_add_lsl(12, 9, 10, 3));
    a64(e, a64_str(11, 12, 8));
    a64(e, a64_add_imm(10, 10, 1));
    a64(e, a64_str(10, 9, 0));
}

/* The pop: mov x9, stack; ldr x10, [x9]; sub x10, x10, #1; str x10, [x9] */
static void emit_shadow_pop(emitter *e, perfsupport_shadow_stack *stack) {
    a64_mov_imm64(e, 9, (uint64_t)(uintptr_t)stack);
    a64(e, a64_ldr(10, 9, 0));
    a64(e, a64_sub_imm(10, 10, 1));
    a64(e, a64_str(10, 9, 0));
}
#else
#error "minijit emits x86-64 or aarch64 code only"
#endif
// ANCHOR_END: shadow_push

/* ---- The three functions -------------------------------------------- */

typedef struct {
    const char *name;
    uint8_t *code;
    size_t size;
    perfsupport_line lines[4];
    size_t line_count;
    uintptr_t vmprof_id;
} function;

static void line_at(function *f, emitter *e, uint32_t line) {
    f->lines[f->line_count++] = (perfsupport_line){
        .offset = (uint32_t)e->len, .file = SOURCE, .line = line, .column = 0};
}

#if defined(__x86_64__)
/* leaf(n): no frame pointer. */
static void emit_leaf(function *f, emitter *e, perfsupport_shadow_stack *stack) {
    line_at(f, e, 3);
    EMIT(e, 0x48, 0x83, 0xec, 0x18);             /* sub rsp, 24 */
    emit_shadow_push(e, stack, f->vmprof_id);
    line_at(f, e, 4);
    EMIT(e, 0x31, 0xc0);                         /* xor eax, eax */
    line_at(f, e, 5);
    EMIT(e, 0x48, 0x01, 0xf8,                    /* loop: add rax, rdi */
         0x48, 0xff, 0xcf,                       /* dec rdi */
         0x75, 0xf8);                            /* jnz loop */
    line_at(f, e, 6);
    emit_shadow_pop(e, stack);
    EMIT(e, 0x48, 0x83, 0xc4, 0x18,              /* add rsp, 24 */
         0xc3);                                  /* ret */
}

/* middle(n): frame pointer; spins n times, then returns leaf(n). */
static void emit_middle(function *f, emitter *e, perfsupport_shadow_stack *stack,
                        const void *leaf) {
    line_at(f, e, 8);
    EMIT(e, 0x55, 0x48, 0x89, 0xe5);             /* push rbp; mov rbp, rsp */
    emit_shadow_push(e, stack, f->vmprof_id);
    line_at(f, e, 9);
    EMIT(e, 0x48, 0x89, 0xfe,                    /* mov rsi, rdi */
         0x48, 0xff, 0xce,                       /* loop: dec rsi */
         0x75, 0xfb);                            /* jnz loop */
    line_at(f, e, 10);
    emit_call(e, leaf);
    emit_shadow_pop(e, stack);
    EMIT(e, 0x5d, 0xc3);                         /* pop rbp; ret */
}

/* outer(rounds): frame pointer; calls middle(WORK) `rounds` times. */
static void emit_outer(function *f, emitter *e, perfsupport_shadow_stack *stack,
                       const void *middle) {
    line_at(f, e, 12);
    EMIT(e, 0x55, 0x48, 0x89, 0xe5,              /* push rbp; mov rbp, rsp */
         0x53,                                   /* push rbx */
         0x48, 0x83, 0xec, 0x08);                /* sub rsp, 8 (align) */
    emit_shadow_push(e, stack, f->vmprof_id);
    EMIT(e, 0x48, 0x89, 0xfb);                   /* mov rbx, rdi */
    line_at(f, e, 13);
    size_t loop = e->len;
    EMIT(e, 0x48, 0xbf);                         /* loop: mov rdi, WORK */
    emit_u64(e, WORK);
    emit_call(e, middle);
    EMIT(e, 0x48, 0xff, 0xcb);                   /* dec rbx */
    EMIT(e, 0x75, (uint8_t)(loop - (e->len + 2))); /* jnz loop */
    line_at(f, e, 14);
    emit_shadow_pop(e, stack);
    EMIT(e, 0x48, 0x83, 0xc4, 0x08,              /* add rsp, 8 */
         0x5b, 0x5d, 0xc3);                      /* pop rbx; pop rbp; ret */
}
#elif defined(__aarch64__)
/* leaf(n): no frame pointer, and x30 (the return address) never leaves
 * the link register. */
static void emit_leaf(function *f, emitter *e, perfsupport_shadow_stack *stack) {
    line_at(f, e, 3);
    a64(e, a64_sub_imm(A64_SP, A64_SP, 32));     /* sub sp, sp, #32 */
    emit_shadow_push(e, stack, f->vmprof_id);
    line_at(f, e, 4);
    a64(e, a64_mov(1, 0));                       /* mov x1, x0 */
    a64(e, a64_movz(0, 0, 0));                   /* mov x0, #0 */
    line_at(f, e, 5);
    size_t loop = e->len;
    a64(e, a64_add_lsl(0, 0, 1, 0));             /* loop: add x0, x0, x1 */
    a64(e, a64_subs_imm(1, 1, 1));               /* subs x1, x1, #1 */
    a64_b_cond_to(e, A64_NE, loop);              /* b.ne loop */
    line_at(f, e, 6);
    emit_shadow_pop(e, stack);
    a64(e, a64_add_imm(A64_SP, A64_SP, 32));     /* add sp, sp, #32 */
    a64(e, a64_ret());                           /* ret */
}

/* middle(n): frame pointer; spins n times, then returns leaf(n). */
static void emit_middle(function *f, emitter *e, perfsupport_shadow_stack *stack,
                        const void *leaf) {
    line_at(f, e, 8);
    a64(e, a64_stp_pre(A64_X29, A64_X30, A64_SP, -16)); /* stp x29, x30, [sp, #-16]! */
    a64(e, a64_add_imm(A64_X29, A64_SP, 0));     /* mov x29, sp */
    emit_shadow_push(e, stack, f->vmprof_id);
    line_at(f, e, 9);
    a64(e, a64_mov(1, 0));                       /* mov x1, x0 */
    size_t loop = e->len;
    a64(e, a64_subs_imm(1, 1, 1));               /* loop: subs x1, x1, #1 */
    a64_b_cond_to(e, A64_NE, loop);              /* b.ne loop */
    line_at(f, e, 10);
    a64_call(e, leaf);                           /* mov x16, leaf; blr x16 */
    emit_shadow_pop(e, stack);
    a64(e, a64_ldp_post(A64_X29, A64_X30, A64_SP, 16)); /* ldp x29, x30, [sp], #16 */
    a64(e, a64_ret());                           /* ret */
}

/* outer(rounds): frame pointer; calls middle(WORK) `rounds` times. The
 * count lives in x19 (callee-saved), saved below the frame record: the
 * CFA stays x29 + 16 there, as PERFSUPPORT_UNWIND_FRAME_POINTER says (like
 * rbx on x86-64, x19's slot is not described). */
static void emit_outer(function *f, emitter *e, perfsupport_shadow_stack *stack,
                       const void *middle) {
    line_at(f, e, 12);
    a64(e, a64_stp_pre(A64_X29, A64_X30, A64_SP, -16)); /* stp x29, x30, [sp, #-16]! */
    a64(e, a64_add_imm(A64_X29, A64_SP, 0));     /* mov x29, sp */
    a64(e, a64_str_pre(19, A64_SP, -16));        /* str x19, [sp, #-16]! */
    emit_shadow_push(e, stack, f->vmprof_id);
    a64(e, a64_mov(19, 0));                      /* mov x19, x0 */
    line_at(f, e, 13);
    size_t loop = e->len;
    a64(e, a64_movz(0, WORK, 0));                /* loop: mov x0, #WORK */
    a64_call(e, middle);                         /* mov x16, middle; blr x16 */
    a64(e, a64_subs_imm(19, 19, 1));             /* subs x19, x19, #1 */
    a64_b_cond_to(e, A64_NE, loop);              /* b.ne loop */
    line_at(f, e, 14);
    emit_shadow_pop(e, stack);
    a64(e, a64_ldr_post(19, A64_SP, 16));        /* ldr x19, [sp], #16 */
    a64(e, a64_ldp_post(A64_X29, A64_X30, A64_SP, 16)); /* ldp x29, x30, [sp], #16 */
    a64(e, a64_ret());                           /* ret */
}
#endif

// ANCHOR: leaf_cfi
/* leaf's CFI: after `sub rsp, 24` (4 bytes) the CFA is rsp + 32; after
 * `add rsp, 24` only the return address is left (CFA = rsp + 8). On
 * aarch64: after `sub sp, sp, #32` (4 bytes) the CFA is sp + 32; at the
 * `ret` it is sp + 0 again, the return address still in x30 (the
 * architecture's STACK_POINTER, ENTRY_CFA_OFFSET and RET_SIZE are defined
 * in emit.h and emit_a64.h). */
static perfsupport_unwind leaf_unwind(size_t size, perfsupport_cfi_row rows[2]) {
    rows[0] = (perfsupport_cfi_row){
        .offset = 4, .cfa_register = STACK_POINTER, .cfa_offset = 32};
    rows[1] = (perfsupport_cfi_row){.offset = (uint32_t)(size - RET_SIZE),
                                    .cfa_register = STACK_POINTER,
                                    .cfa_offset = ENTRY_CFA_OFFSET};
    return (perfsupport_unwind){.kind = PERFSUPPORT_UNWIND_ROWS, .rows = rows, .row_count = 2};
}
// ANCHOR_END: leaf_cfi

static const perfsupport_unwind FRAME_POINTER = {.kind = PERFSUPPORT_UNWIND_FRAME_POINTER};

/* What the host C code runs: marked in the shadow stack as <main>. */
__attribute__((noinline)) static uint64_t run_jit(void (*outer)(uint64_t), uint64_t rounds,
                                                  perfsupport_shadow_stack *stack,
                                                  uintptr_t main_id) {
    perfsupport_shadow_stack_push(stack, main_id);
    outer(rounds);
    perfsupport_shadow_stack_pop(stack);
    return rounds;
}

int main(int argc, char **argv) {
    uint64_t rounds = 2000;
    const char *jitdump_dir = ".";
    const char *vmprof_path = NULL;
    int with_cfi = 1;
    uint32_t outputs = PERFSUPPORT_OUTPUT_PERF_MAP | PERFSUPPORT_OUTPUT_JITDUMP;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
            rounds = strtoull(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--jitdump-dir") && i + 1 < argc) {
            jitdump_dir = argv[++i];
        } else if (!strcmp(argv[i], "--vmprof") && i + 1 < argc) {
            vmprof_path = argv[++i];
        } else if (!strcmp(argv[i], "--no-cfi")) {
            with_cfi = 0;
        } else if (!strcmp(argv[i], "--perf-map-only")) {
            outputs = PERFSUPPORT_OUTPUT_PERF_MAP;
        } else {
            fprintf(stderr, "usage: minijit [--rounds N] [--jitdump-dir DIR] [--no-cfi] "
                            "[--vmprof FILE] [--perf-map-only]\n");
            return 2;
        }
    }
    if (rounds == 0) rounds = 1;

    // ANCHOR: setup
    /* 1. Before any code is executable: the outputs (the jitdump's marker
     *    must be mapped first) and this thread's shadow stack. */
    perfsupport_profilers *prof;
    int rc = perfsupport_profilers_open(outputs, jitdump_dir, &prof);
    if (rc) die("perfsupport_profilers_open", rc);
    perfsupport_shadow_stack *stack;
    if ((rc = perfsupport_vmprof_attach_thread(&stack))) die("attach_thread", rc);
    function fs[3] = {{.name = "minijit::leaf"}, {.name = "minijit::middle"},
                      {.name = "minijit::outer"}};
    const char *funcs[3] = {"leaf", "middle", "outer"};
    const uint32_t first_lines[3] = {3, 8, 12};
    for (int i = 0; i < 3; i++) {
        rc = perfsupport_vmprof_register_code("minijit", funcs[i], first_lines[i], SOURCE,
                                              &fs[i].vmprof_id);
        if (rc) die("vmprof_register_code", rc);
    }
    uintptr_t main_id;
    if ((rc = perfsupport_vmprof_register_code("minijit", "<main>", 1, "minijit.c", &main_id)))
        die("vmprof_register_code", rc);
    // ANCHOR_END: setup

    /* 2. Emit into anonymous memory, each function at a stride of
     *    perfsupport_reserved_region_size so perf's injected ranges
     *    (code + unwind tables) never overlap. */
    size_t arena_size = 1 << 16;
    uint8_t *arena = mmap(NULL, arena_size, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (arena == MAP_FAILED) { perror("mmap"); return 1; }
    emitter e = {arena, 0};
    perfsupport_cfi_row leaf_rows[2];
    perfsupport_unwind unwinds[3];
    for (int i = 0; i < 3; i++) {
        function *f = &fs[i];
        size_t start = e.len;
        e.len = 0;
        emitter fe = {arena + start, 0};
        if (i == 0) emit_leaf(f, &fe, stack);
        if (i == 1) emit_middle(f, &fe, stack, fs[0].code);
        if (i == 2) emit_outer(f, &fe, stack, fs[1].code);
        f->code = arena + start;
        f->size = fe.len;
        unwinds[i] = i == 0 ? leaf_unwind(f->size, leaf_rows) : FRAME_POINTER;
        size_t reserved;
        if ((rc = perfsupport_reserved_region_size(f->size, &unwinds[i], &reserved)))
            die("reserved_region_size", rc);
        e.len = start + reserved;
    }
    /* The code was written through the data cache: make instruction fetch
     * see it before it runs (aarch64's instruction cache is not coherent
     * with stores; a no-op on x86-64, where it is). */
    __builtin___clear_cache((char *)arena, (char *)arena + e.len);
    if (mprotect(arena, arena_size, PROT_READ | PROT_EXEC)) { perror("mprotect"); return 1; }

    // ANCHOR: register
    /* 3. The code is final and executable: describe it, before it runs. */
    perfsupport_region regions[3];
    for (int i = 0; i < 3; i++) {
        regions[i] = (perfsupport_region){
            .code = fs[i].code,
            .size = fs[i].size,
            .name = fs[i].name,
            /* --no-cfi: the negative control, leaf without CFI. */
            .unwind = (i == 0 && !with_cfi) ? NULL : &unwinds[i],
            .lines = fs[i].lines,
            .line_count = fs[i].line_count,
        };
    }
    if ((rc = perfsupport_register(prof, regions, 3))) die("perfsupport_register", rc);
    // ANCHOR_END: register

    // ANCHOR: run
    if (vmprof_path && (rc = perfsupport_vmprof_enable(vmprof_path, "minijit", 1000)))
        die("vmprof_enable", rc);
    run_jit((void (*)(uint64_t))(void *)fs[2].code, rounds, stack, main_id);
    uint64_t samples = 0;
    if (vmprof_path && (rc = perfsupport_vmprof_disable(&samples))) die("vmprof_disable", rc);
    if ((rc = perfsupport_profilers_finish(prof))) die("perfsupport_profilers_finish", rc);
    // ANCHOR_END: run
    printf("minijit: ran outer(%llu)", (unsigned long long)rounds);
    for (int i = 0; i < 3; i++) printf(" %s@%p+%zu", fs[i].name, (void *)fs[i].code, fs[i].size);
    if (vmprof_path) printf(" vmprof_samples=%llu", (unsigned long long)samples);
    printf("\n");
    return 0;
}
