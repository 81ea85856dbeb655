/* header_contract: what perfsupport.h promises next to each call, checked.
 * Prints one line per check; exits 1 if one fails.
 *   - conflicting opens of one output are PERFSUPPORT_ESTATE, file
 *     problems PERFSUPPORT_EOPEN;
 *   - a NULL jitdump directory is $JITDUMPDIR, else /tmp;
 *   - the smallest regions perfsupport_reserved_region_size takes;
 *   - a region's name, unwind description and lines are copied during the
 *     call (the caller may reuse them at once);
 *   - two regions of one batch may not overlap;
 *   - every range the API takes is checked: a size of 0 where a region
 *     needs bytes, or a start + size past the end of the address space, is
 *     PERFSUPPORT_EINVAL in every output, register and retire alike. */
#include <perfsupport.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;

static void check(int ok, const char *what) {
    printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", what, ok ? "" : ": ",
           ok ? "" : perfsupport_last_error());
    if (!ok) failures++;
}

static int file_exists(const char *path) { return access(path, F_OK) == 0; }

int main(void) {
#if defined(__aarch64__)
    /* stp x29, x30, [sp, #-16]!; mov x29, sp; nop; ldp x29, x30, [sp], #16; ret */
    static const unsigned char code[] = {0xfd, 0x7b, 0xbf, 0xa9, 0xfd, 0x03, 0x00, 0x91, 0x1f,
                                         0x20, 0x03, 0xd5, 0xfd, 0x7b, 0xc1, 0xa8, 0xc0, 0x03,
                                         0x5f, 0xd6};
    enum { FRAME_POINTER_MIN = 16 }; /* stp; mov x29, sp; ldp; ret */
#else
    /* push rbp; mov rbp, rsp; nop; nop; leave; ret */
    static const unsigned char code[] = {0x55, 0x48, 0x89, 0xe5, 0x90, 0x90, 0xc9, 0xc3};
    enum { FRAME_POINTER_MIN = 6 }; /* push rbp; mov rbp, rsp; pop rbp; ret */
#endif
    char path[4096];
    perfsupport_profilers *first = NULL, *second = NULL;

    /* The jitdump directory: NULL is $JITDUMPDIR (set by the test to a
     * scratch directory, or unset), else /tmp. */
    const char *env = getenv("JITDUMPDIR");
    snprintf(path, sizeof path, "%s/jit-%d.dump", env && *env ? env : "/tmp", (int)getpid());
    check(perfsupport_profilers_open(PERFSUPPORT_OUTPUT_JITDUMP, NULL, &first) == PERFSUPPORT_OK,
          "open a jitdump in the default directory");
    check(file_exists(path), env && *env ? "the dump is in $JITDUMPDIR" : "the dump is in /tmp");

    /* One jitdump per process: a second set with it conflicts. */
    check(perfsupport_profilers_open(PERFSUPPORT_OUTPUT_JITDUMP, NULL, &second) ==
              PERFSUPPORT_ESTATE,
          "a second jitdump is ESTATE");
    check(strstr(perfsupport_last_error(), "already written by this process") != NULL,
          "the message says why");
    check(perfsupport_profilers_open(PERFSUPPORT_OUTPUT_JITDUMP, "/nonexistent/dir", &second) ==
              PERFSUPPORT_EOPEN,
          "a missing directory is EOPEN");

    /* One perf map writer per process: the regions path, then the trio. */
    check(perfsupport_profilers_open(PERFSUPPORT_OUTPUT_PERF_MAP | PERFSUPPORT_OUTPUT_GDB, NULL,
                                     &second) == PERFSUPPORT_OK,
          "open a perf map with the GDB output");
    check(perfsupport_perf_map_init() == PERFSUPPORT_ESTATE, "the trio after it is ESTATE");

    /* What a region points to is copied during the call. */
    char *name = malloc(64);
    strcpy(name, "contract::copied");
    perfsupport_line *line = malloc(sizeof *line);
    *line = (perfsupport_line){.offset = 0, .file = "contract.mj", .line = 1};
    perfsupport_unwind *fp = malloc(sizeof *fp);
    *fp = (perfsupport_unwind){.kind = PERFSUPPORT_UNWIND_FRAME_POINTER};
    perfsupport_region region = {.code = code, .size = sizeof code, .name = name,
                                 .unwind = fp, .lines = line, .line_count = 1};
    check(perfsupport_register(second, &region, 1) == PERFSUPPORT_OK, "register");
    memset(name, 'x', 63);
    name[63] = 0;
    free(name);
    free(line);
    free(fp);
    /* Two regions of one batch may not share a code byte. */
    perfsupport_region overlapping[2] = {
        {.code = code, .size = 6, .name = "contract::a"},
        {.code = code + 4, .size = 4, .name = "contract::b"},
    };
    check(perfsupport_register(second, overlapping, 2) == PERFSUPPORT_EINVAL,
          "overlapping regions in one batch are EINVAL");
    check(strstr(perfsupport_last_error(), "overlap") != NULL &&
              strstr(perfsupport_last_error(), "contract::b") != NULL,
          "the message names them");
    check(perfsupport_profilers_finish(second) == PERFSUPPORT_OK, "finish");
    snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)getpid());
    FILE *map = fopen(path, "r");
    char text[4096] = "";
    size_t got = map ? fread(text, 1, sizeof text - 1, map) : 0;
    text[got] = 0;
    if (map) fclose(map);
    check(strstr(text, " contract::copied\n") != NULL, "the map has the name as it was");
    unlink(path);

    /* The smallest regions. */
    size_t reserved = 0;
    perfsupport_unwind frame = {.kind = PERFSUPPORT_UNWIND_FRAME_POINTER};
    char least[32];
    snprintf(least, sizeof least, "at least %d bytes", FRAME_POINTER_MIN);
    check(perfsupport_reserved_region_size(FRAME_POINTER_MIN - 1, &frame, &reserved) ==
              PERFSUPPORT_EINVAL,
          "a frame-pointer region 1 byte below the smallest is EINVAL");
    check(strstr(perfsupport_last_error(), least) != NULL, "the message says the smallest");
    check(perfsupport_reserved_region_size(FRAME_POINTER_MIN, &frame, &reserved) ==
              PERFSUPPORT_OK,
          "the smallest size with frame-pointer unwind info");
    check(perfsupport_reserved_region_size(1, NULL, &reserved) == PERFSUPPORT_OK && reserved >= 1,
          "1 byte without unwind info");
    check(perfsupport_reserved_region_size(0, NULL, &reserved) == PERFSUPPORT_EINVAL,
          "0 bytes is EINVAL");

    /* Ranges: checked before any output reads or forgets anything. */
    perfsupport_profilers *all = NULL;
    check(perfsupport_profilers_open(PERFSUPPORT_OUTPUT_GDB, NULL, &all) == PERFSUPPORT_OK,
          "open the GDB output");
    perfsupport_region live = {.code = code, .size = sizeof code, .name = "contract::live"};
    check(perfsupport_register(first, &live, 1) == PERFSUPPORT_OK &&
              perfsupport_register(all, &live, 1) == PERFSUPPORT_OK,
          "register a region in the jitdump and the GDB output");
    perfsupport_profilers *sets[2] = {first, all};
    for (int i = 0; i < 2; i++) {
        perfsupport_code_range wraps = {.start = (uintptr_t)code, .size = SIZE_MAX};
        check(perfsupport_retire(sets[i], &wraps, 1) == PERFSUPPORT_EINVAL,
              "retire {start, SIZE_MAX} is EINVAL (start + size overflows)");
        check(strstr(perfsupport_last_error(), "overflows") != NULL, "the message says so");
        perfsupport_code_range empty = {.start = (uintptr_t)code, .size = 0};
        check(perfsupport_retire(sets[i], &empty, 1) == PERFSUPPORT_EINVAL,
              "retire of 0 bytes is EINVAL");
        perfsupport_region high = {.code = (const void *)(UINTPTR_MAX - 3), .size = 16,
                                   .name = "contract::high"};
        check(perfsupport_register(sets[i], &high, 1) == PERFSUPPORT_EINVAL,
              "register code + size past the address space is EINVAL");
        perfsupport_region none = {.code = code, .size = 0, .name = "contract::none"};
        check(perfsupport_register(sets[i], &none, 1) == PERFSUPPORT_EINVAL,
              "register 0 bytes of code is EINVAL");
        perfsupport_code_range dead = {.start = (uintptr_t)code, .size = sizeof code};
        check(perfsupport_retire(sets[i], &dead, 1) == PERFSUPPORT_OK,
              "the output still works: retire the region");
    }
    check(perfsupport_profilers_finish(all) == PERFSUPPORT_OK, "finish the GDB output");

    check(perfsupport_profilers_finish(first) == PERFSUPPORT_OK, "finish the jitdump");
    snprintf(path, sizeof path, "%s/jit-%d.dump", env && *env ? env : "/tmp", (int)getpid());
    unlink(path);
    printf("%d failed\n", failures);
    return failures != 0;
}
