/* emit_a64.h: the aarch64 instruction encoders the C examples assemble
 * with on aarch64 (minijit.c, elfjit.c), on top of emit.h's byte emitter.
 * Every aarch64 instruction is one 32-bit little-endian word; each helper
 * returns that word for the assembly in its comment, and a64() appends it.
 * Registers are numbers: 0-30 for x0-x30; 31 is sp or xzr, depending on
 * the instruction (as the comments say). */
#ifndef MINIJIT_EMIT_A64_H
#define MINIJIT_EMIT_A64_H

#include "emit.h"

#include <stdint.h>

enum { A64_X29 = 29, A64_X30 = 30, A64_SP = 31, A64_XZR = 31 };

/* Condition codes of b.cond. */
enum { A64_NE = 1, A64_HS = 2 };

/* Appends one instruction. */
static inline void a64(emitter *e, uint32_t insn) { emit_u32(e, insn); }

/* movz xd, #imm16, lsl #shift (shift 0, 16, 32 or 48) */
static inline uint32_t a64_movz(unsigned rd, uint16_t imm16, unsigned shift) {
    return 0xd2800000u | (shift / 16) << 21 | (uint32_t)imm16 << 5 | rd;
}

/* movk xd, #imm16, lsl #shift: replaces those 16 bits, keeps the rest */
static inline uint32_t a64_movk(unsigned rd, uint16_t imm16, unsigned shift) {
    return 0xf2800000u | (shift / 16) << 21 | (uint32_t)imm16 << 5 | rd;
}

/* movz xd, #v[15:0]; movk xd, #v[31:16], lsl #16; movk ... lsl #32;
 * movk ... lsl #48: any 64-bit value, always 4 instructions (16 bytes) */
static inline void a64_mov_imm64(emitter *e, unsigned rd, uint64_t v) {
    a64(e, a64_movz(rd, (uint16_t)v, 0));
    for (unsigned shift = 16; shift < 64; shift += 16)
        a64(e, a64_movk(rd, (uint16_t)(v >> shift), shift));
}

/* mov xd, xm (orr xd, xzr, xm); not for sp */
static inline uint32_t a64_mov(unsigned rd, unsigned rm) {
    return 0xaa0003e0u | rm << 16 | rd;
}

/* add xd, xn|sp, #imm12 (mov x29, sp is add x29, sp, #0) */
static inline uint32_t a64_add_imm(unsigned rd, unsigned rn, uint32_t imm12) {
    return 0x91000000u | imm12 << 10 | rn << 5 | rd;
}

/* sub xd, xn|sp, #imm12 */
static inline uint32_t a64_sub_imm(unsigned rd, unsigned rn, uint32_t imm12) {
    return 0xd1000000u | imm12 << 10 | rn << 5 | rd;
}

/* subs xd, xn, #imm12 (cmp xn, #imm12 is subs xzr, xn, #imm12) */
static inline uint32_t a64_subs_imm(unsigned rd, unsigned rn, uint32_t imm12) {
    return 0xf1000000u | imm12 << 10 | rn << 5 | rd;
}

/* add xd, xn, xm, lsl #shift */
static inline uint32_t a64_add_lsl(unsigned rd, unsigned rn, unsigned rm, unsigned shift) {
    return 0x8b000000u | rm << 16 | shift << 10 | rn << 5 | rd;
}

/* ldr xt, [xn|sp, #imm] (imm a multiple of 8, below 32 KiB) */
static inline uint32_t a64_ldr(unsigned rt, unsigned rn, uint32_t imm) {
    return 0xf9400000u | (imm / 8) << 10 | rn << 5 | rt;
}

/* str xt, [xn|sp, #imm] (imm a multiple of 8, below 32 KiB) */
static inline uint32_t a64_str(unsigned rt, unsigned rn, uint32_t imm) {
    return 0xf9000000u | (imm / 8) << 10 | rn << 5 | rt;
}

/* str xt, [xn|sp, #imm]! (pre-index: sp -= ..., then store; -256..255) */
static inline uint32_t a64_str_pre(unsigned rt, unsigned rn, int32_t imm) {
    return 0xf8000c00u | ((uint32_t)imm & 0x1ff) << 12 | rn << 5 | rt;
}

/* ldr xt, [xn|sp], #imm (post-index: load, then sp += ...; -256..255) */
static inline uint32_t a64_ldr_post(unsigned rt, unsigned rn, int32_t imm) {
    return 0xf8400400u | ((uint32_t)imm & 0x1ff) << 12 | rn << 5 | rt;
}

/* stp xt, xt2, [xn|sp, #imm]! (imm a multiple of 8, -512..504) */
static inline uint32_t a64_stp_pre(unsigned rt, unsigned rt2, unsigned rn, int32_t imm) {
    return 0xa9800000u | ((uint32_t)(imm / 8) & 0x7f) << 15 | rt2 << 10 | rn << 5 | rt;
}

/* ldp xt, xt2, [xn|sp], #imm (imm a multiple of 8, -512..504) */
static inline uint32_t a64_ldp_post(unsigned rt, unsigned rt2, unsigned rn, int32_t imm) {
    return 0xa8c00000u | ((uint32_t)(imm / 8) & 0x7f) << 15 | rt2 << 10 | rn << 5 | rt;
}

/* b.cond to the instruction `delta` instructions away (negative: back) */
static inline uint32_t a64_b_cond(unsigned cond, int32_t delta) {
    return 0x54000000u | ((uint32_t)delta & 0x7ffff) << 5 | cond;
}

/* blr xn: call the address in xn (the return address goes to x30) */
static inline uint32_t a64_blr(unsigned rn) { return 0xd63f0000u | rn << 5; }

/* ret (to x30) */
static inline uint32_t a64_ret(void) { return 0xd65f03c0u; }

/* movz/movk x16, target; blr x16: a call to any address (20 bytes); x16
 * (ip0) is the scratch register the ABI gives calls. */
static inline void a64_call(emitter *e, const void *target) {
    a64_mov_imm64(e, 16, (uint64_t)(uintptr_t)target);
    a64(e, a64_blr(16));
}

/* b.cond from here to the instruction at byte `target` (of the same
 * emitter). */
static inline void a64_b_cond_to(emitter *e, unsigned cond, size_t target) {
    a64(e, a64_b_cond(cond, (int32_t)((int64_t)target - (int64_t)e->len) / 4));
}

/* For CFI rows (perfsupport.h's registers): the rule at a function's
 * entry, CFA = sp + 0 (the return address is still in x30), and the size
 * of `ret`. */
#define STACK_POINTER PERFSUPPORT_REG_SP
#define ENTRY_CFA_OFFSET 0
#define RET_SIZE 4

#endif /* MINIJIT_EMIT_A64_H */
