/* portable_header: calls every inline function of perfsupport.h. The
 * test builds it with each C compiler a JIT might use, in strict modes:
 * gcc and clang with -std=c99 -pedantic and -std=c11, and tcc (which has
 * none of GCC's __atomic builtins). Prints "portable: ok" or exits 1. */
#include <perfsupport.h>
#include <perfsupport.h> /* twice: the header must be idempotent */

#include <stdio.h>

#if !defined(PERFSUPPORT_VERSION) || PERFSUPPORT_VERSION < 200
#error "this program needs perfsupport.h 0.2 or later"
#endif

static int failures;

static void check(int ok, const char *what) {
    if (!ok) {
        printf("FAIL %s\n", what);
        failures++;
    }
}

int main(void) {
    perfsupport_shadow_stack *stack = NULL;
    size_t id = 0;
    size_t i;
    if (perfsupport_vmprof_attach_thread(&stack) != PERFSUPPORT_OK ||
        perfsupport_vmprof_register_code("portable", "f", 1, "portable.c", &id) !=
            PERFSUPPORT_OK) {
        printf("FAIL set-up: %s\n", perfsupport_last_error());
        return 1;
    }
    perfsupport_shadow_stack_pop(stack);
    check(stack->depth == 0, "pop on an empty stack leaves it empty");
    perfsupport_shadow_stack_push(stack, id);
    perfsupport_shadow_stack_push(stack, id + 2);
    check(stack->depth == 2 && stack->ids[0] == id && stack->ids[1] == id + 2,
          "push stores the id, then the depth");
    perfsupport_shadow_stack_pop(stack);
    check(stack->depth == 1 && stack->ids[0] == id, "pop leaves the frame below");
    perfsupport_shadow_stack_pop(stack);
    /* Past the capacity frames are counted, not stored. */
    for (i = 0; i < PERFSUPPORT_SHADOW_STACK_CAPACITY + 3; i++) {
        perfsupport_shadow_stack_push(stack, id + 2 * (i % 7));
    }
    check(stack->depth == PERFSUPPORT_SHADOW_STACK_CAPACITY + 3, "deep frames are counted");
    check(stack->ids[PERFSUPPORT_SHADOW_STACK_CAPACITY - 1] ==
              id + 2 * ((PERFSUPPORT_SHADOW_STACK_CAPACITY - 1) % 7),
          "the last stored frame");
    for (i = 0; i < PERFSUPPORT_SHADOW_STACK_CAPACITY + 3; i++) {
        perfsupport_shadow_stack_pop(stack);
    }
    check(stack->depth == 0, "every frame left");
    if (failures == 0) printf("portable: ok\n");
    return failures != 0;
}
