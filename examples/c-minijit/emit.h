/* emit.h: the byte emitter the C examples assemble x86-64 code with
 * (minijit.c, packed.c, elfjit.c). Code goes to `base + len`; the caller
 * provides room. aarch64 instructions are emitted as 32-bit words with the
 * encoders of emit_a64.h, on top of this. */
#ifndef MINIJIT_EMIT_H
#define MINIJIT_EMIT_H

#include <stdint.h>
#include <string.h>

typedef struct {
    uint8_t *base;
    size_t len;
} emitter;

static inline void emit(emitter *e, const uint8_t *bytes, size_t n) {
    memcpy(e->base + e->len, bytes, n);
    e->len += n;
}

/* EMIT(e, 0x55, 0xc3): the bytes given, in order. */
#define EMIT(e, ...)                                                  \
    do {                                                              \
        const uint8_t bytes_[] = {__VA_ARGS__};                       \
        emit((e), bytes_, sizeof bytes_);                             \
    } while (0)

static inline void emit_u64(emitter *e, uint64_t v) { emit(e, (const uint8_t *)&v, 8); }
static inline void emit_u32(emitter *e, uint32_t v) { emit(e, (const uint8_t *)&v, 4); }

/* x86-64: mov rax, imm64; call rax: a call to any address (12 bytes). */
static inline void emit_call(emitter *e, const void *target) {
    EMIT(e, 0x48, 0xb8);
    emit_u64(e, (uint64_t)(uintptr_t)target);
    EMIT(e, 0xff, 0xd0);
}

#if defined(__x86_64__)
/* For CFI rows (perfsupport.h's registers): the rule at a function's
 * entry, CFA = rsp + 8 (the return address the call pushed), and the size
 * of `ret`. emit_a64.h has aarch64's. */
#define STACK_POINTER PERFSUPPORT_REG_RSP
#define ENTRY_CFA_OFFSET 8
#define RET_SIZE 1
#endif

#endif /* MINIJIT_EMIT_H */
