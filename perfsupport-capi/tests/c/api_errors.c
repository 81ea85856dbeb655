/* api_errors: return codes and messages of bad calls, linked statically
 * (libperfsupport.a). Prints one line per check; exits 1 if one fails. */
#include <perfsupport.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

static int failures;

static void check(int got, int want, const char *needle, const char *what) {
    const char *message = perfsupport_last_error();
    int ok = got == want && (!needle || strstr(message, needle));
    printf("%s %s: rc=%d message=%s\n", ok ? "ok  " : "FAIL", what, got, message);
    if (!ok) failures++;
}

int main(void) {
#if defined(__aarch64__)
    /* stp x29, x30, [sp, #-16]!; mov x29, sp; nop; ldp x29, x30, [sp], #16; ret */
    static const unsigned char code[] = {0xfd, 0x7b, 0xbf, 0xa9, 0xfd, 0x03, 0x00, 0x91, 0x1f,
                                         0x20, 0x03, 0xd5, 0xfd, 0x7b, 0xc1, 0xa8, 0xc0, 0x03,
                                         0x5f, 0xd6};
#else
    /* push rbp; mov rbp, rsp; nop; pop rbp; ret */
    static const unsigned char code[] = {0x55, 0x48, 0x89, 0xe5, 0x90, 0x5d, 0xc3};
#endif
    check(perfsupport_write_perf_map_entry(code, sizeof code, NULL), PERFSUPPORT_EINVAL,
          "entry_name is NULL", "NULL name");
    check(perfsupport_write_perf_map_entry(code, sizeof code, "ab"), PERFSUPPORT_EINVAL, "ab",
          "a name perf drops");
    check(perfsupport_write_perf_map_entry(code, sizeof code, "bad\xff"), PERFSUPPORT_EINVAL,
          "UTF-8", "a name that is not UTF-8");
    check(perfsupport_perf_map_init(), PERFSUPPORT_OK, NULL, "init");
    check(perfsupport_perf_map_init(), PERFSUPPORT_OK, NULL, "init twice");
    check(perfsupport_write_perf_map_entry(code, sizeof code, "capi::entry"), PERFSUPPORT_OK,
          NULL, "write");
    perfsupport_perf_map_fini();
    check(perfsupport_write_perf_map_entry(code, sizeof code, "capi::late"), PERFSUPPORT_ESTATE,
          "fini", "write after fini");

    perfsupport_profilers *prof = NULL;
    check(perfsupport_profilers_open(0, ".", &prof), PERFSUPPORT_EINVAL, "outputs",
          "no outputs");
    check(perfsupport_profilers_open(PERFSUPPORT_OUTPUT_JITDUMP, "/nonexistent/dir", &prof),
          PERFSUPPORT_EOPEN, "jitdump", "jitdump in a missing directory");
    check(perfsupport_profilers_open(PERFSUPPORT_OUTPUT_JITDUMP, ".", &prof), PERFSUPPORT_OK,
          NULL, "open");
    perfsupport_cfi_row rows[2] = {
        {.offset = 3, .cfa_register = PERFSUPPORT_REG_RSP, .cfa_offset = 16},
        {.offset = 1, .cfa_register = PERFSUPPORT_REG_RSP, .cfa_offset = 8},
    };
    perfsupport_unwind unsorted = {.kind = PERFSUPPORT_UNWIND_ROWS, .rows = rows, .row_count = 2};
    perfsupport_region region = {.code = code, .size = sizeof code, .name = "capi::unsorted",
                                 .unwind = &unsorted};
    check(perfsupport_register(prof, &region, 1), PERFSUPPORT_EINVAL, "capi::unsorted",
          "unsorted CFI rows name the region");
    perfsupport_unwind unknown = {.kind = 7};
    region.unwind = &unknown;
    check(perfsupport_register(prof, &region, 1), PERFSUPPORT_EINVAL, "unknown kind",
          "unknown unwind kind");
    region.unwind = NULL;
    region.line_count = 2;
    check(perfsupport_register(prof, &region, 1), PERFSUPPORT_EINVAL, "lines",
          "lines NULL with a count");
    region.line_count = 0;
    check(perfsupport_register(prof, &region, 1), PERFSUPPORT_OK, NULL, "a good region");
    check(perfsupport_register(NULL, &region, 1), PERFSUPPORT_EINVAL, "NULL", "NULL profilers");
    perfsupport_code_range dead = {.start = (uintptr_t)code, .size = sizeof code};
    check(perfsupport_retire(prof, &dead, 1), PERFSUPPORT_OK, NULL, "retire a region");
    check(perfsupport_retire(prof, NULL, 1), PERFSUPPORT_EINVAL, "ranges", "retire NULL ranges");
    check(perfsupport_retire(NULL, &dead, 1), PERFSUPPORT_EINVAL, "NULL", "retire NULL profilers");
    check(perfsupport_profilers_finish(prof), PERFSUPPORT_OK, NULL, "finish");

    uintptr_t id;
    check(perfsupport_vmprof_register_code("a:b", "f", 1, "x.mj", &id), PERFSUPPORT_EINVAL,
          "prefix", "a class prefix with a colon");
    check(perfsupport_vmprof_register_code("mj", "f", 1, "x.mj", &id), PERFSUPPORT_OK, NULL,
          "register a code");
    check(perfsupport_vmprof_retire_code(&id, 1), PERFSUPPORT_OK, NULL, "retire it");
    check(perfsupport_vmprof_retire_code(NULL, 1), PERFSUPPORT_EINVAL, "ids", "retire NULL ids");
    check(perfsupport_vmprof_disable(NULL), PERFSUPPORT_ESTATE, "not enabled",
          "disable when not enabled");
    check(perfsupport_vmprof_enable("p.prof", "minijit", 5), PERFSUPPORT_EINVAL, "interval",
          "an interval below 10 us");
    /* Code files: every range is checked before anything is read. */
    perfsupport_code_files *files = NULL;
    check(perfsupport_code_files_open(".", "a/b", &files), PERFSUPPORT_EINVAL, "a/b",
          "a name with a slash");
    check(perfsupport_code_files_open("/nonexistent/dir", "capi", &files), PERFSUPPORT_EOPEN,
          "/nonexistent/dir", "code files in a missing directory");
    check(perfsupport_code_files_open(".", "capi", &files), PERFSUPPORT_OK, NULL,
          "open code files");
    perfsupport_code_chunk *chunk = NULL;
    check(perfsupport_code_chunk_alloc(files, 0, 1, &chunk), PERFSUPPORT_EINVAL, "0 bytes",
          "a chunk of 0 bytes");
    check(perfsupport_code_chunk_alloc(NULL, 64, 1, &chunk), PERFSUPPORT_EINVAL, "NULL",
          "a chunk of no files");
    check(perfsupport_code_chunk_alloc(files, 64, 1, &chunk), PERFSUPPORT_OK, NULL,
          "allocate a chunk");
    check(perfsupport_code_chunk_capacity(chunk) == 64, 1, NULL, "its capacity");
    check(perfsupport_code_chunk_write(chunk, 60, code, sizeof code), PERFSUPPORT_EINVAL,
          "do not fit", "a write past the capacity");
    check(perfsupport_code_chunk_write(chunk, SIZE_MAX, code, 1), PERFSUPPORT_EINVAL,
          "do not fit", "a write whose end overflows");
    check(perfsupport_code_chunk_write(chunk, 0, NULL, 4), PERFSUPPORT_EINVAL, "bytes",
          "a write of NULL bytes");
    check(perfsupport_code_chunk_write(chunk, 0, code, sizeof code), PERFSUPPORT_OK, NULL,
          "write the code");
    unsigned char *at = perfsupport_code_chunk_address(chunk);
    perfsupport_region in_chunk = {.code = at, .size = sizeof code, .name = "capi::chunk"};
    perfsupport_region outside = in_chunk;
    outside.code = code;
    check(perfsupport_code_chunk_publish(chunk, files, &outside, 1), PERFSUPPORT_EINVAL,
          "not inside the chunk", "a region outside the chunk");
    outside.code = at + 60;
    check(perfsupport_code_chunk_publish(chunk, files, &outside, 1), PERFSUPPORT_EINVAL,
          "not inside the chunk", "a region past the chunk's end");
    outside.code = (const void *)(uintptr_t)-4;
    check(perfsupport_code_chunk_publish(chunk, files, &outside, 1), PERFSUPPORT_EINVAL,
          "not inside the chunk", "a region at the end of the address space");
    perfsupport_region two[2] = {in_chunk, in_chunk};
    two[1].code = at + 2;
    check(perfsupport_code_chunk_publish(chunk, files, two, 2), PERFSUPPORT_EINVAL, "overlap",
          "overlapping regions");
    check(perfsupport_code_chunk_publish(chunk, files, &in_chunk, 1), PERFSUPPORT_OK, NULL,
          "publish");
    check(perfsupport_code_chunk_publish(chunk, files, &in_chunk, 1), PERFSUPPORT_ESTATE,
          "already published", "publish twice");
    check(perfsupport_code_chunk_write(chunk, 0, code, 1), PERFSUPPORT_ESTATE, "final",
          "a write after publishing");
    check(perfsupport_code_chunk_free(chunk), PERFSUPPORT_OK, NULL, "free the chunk");
    check(perfsupport_code_chunk_free(NULL), PERFSUPPORT_OK, NULL, "free NULL");
    check(perfsupport_code_files_close(files), PERFSUPPORT_OK, NULL, "close the files");
    size_t reserved = 0;
    perfsupport_unwind fp = {.kind = PERFSUPPORT_UNWIND_FRAME_POINTER};
    check(perfsupport_reserved_region_size(sizeof code, &fp, &reserved), PERFSUPPORT_OK, NULL,
          "reserved size");
    check(reserved % 16 == 0 && reserved > sizeof code, 1, NULL, "reserved size is padded");
    printf("%d failed\n", failures);
    return failures != 0;
}
