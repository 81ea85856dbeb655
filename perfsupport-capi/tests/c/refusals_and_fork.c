/* refusals_and_fork: calls that are refused touch nothing, a failed open
 * leaves nothing claimed, and a forked child gets a clean state of its own.
 *
 * usage: refusals_and_fork MODE   (run in a scratch directory)
 *   refusals  a second vmprof enable; a failed profilers_open, then another
 *             open; reserved_region_size of 0 bytes
 *   trio      a failed profilers_open, then the CPython-style trio
 *   vmprof    profiling, fork: the child starts off, profiles itself
 *             (parent.prof, child.prof)
 *   perfmap   the trio's map, fork, a line written by the parent after the
 *             fork, then the child's after_fork_child and its own line
 *   regions   profilers_open, fork: the child's jitdump stops, its perf map
 *             goes on
 *
 * Prints one line per check and "N failed"; exits 1 if a check fails. The
 * Rust side (tests/refusals_and_fork.rs) reads the files it leaves. */
#include <perfsupport.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int failures;

static void check(int ok, const char *what) {
    printf("%s [%d] %s (last error: %s)\n", ok ? "ok  " : "FAIL", (int)getpid(), what,
           perfsupport_last_error());
    fflush(stdout);
    if (!ok) failures++;
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static int file_is(const char *path, const char *text) {
    char buffer[64] = {0};
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buffer, 1, sizeof buffer - 1, f);
    fclose(f);
    return n == strlen(text) && memcmp(buffer, text, n) == 0;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* Burns CPU for `seconds` with `id` on the shadow stack. */
static volatile unsigned long sink;
static void spin(perfsupport_shadow_stack *stack, uintptr_t id, double seconds) {
    perfsupport_shadow_stack_push(stack, id);
    struct timespec start, now;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
    do {
        for (int i = 0; i < 100000; i++) sink += (unsigned long)i * 7;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    } while ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 < seconds);
    perfsupport_shadow_stack_pop(stack);
}

static const unsigned char code[] = {0x55, 0x48, 0x89, 0xe5, 0x90, 0x5d, 0xc3};

static void refusals(void) {
    perfsupport_shadow_stack *stack = NULL;
    uintptr_t id = 0;
    check(perfsupport_vmprof_attach_thread(&stack) == 0, "attach");
    check(perfsupport_vmprof_register_code("mj", "work", 1, "refusals.mj", &id) == 0, "register");
    check(perfsupport_vmprof_enable("live.prof", "refusals", 1000) == 0, "enable");
    spin(stack, id, 0.2);
    write_file("other.prof", "keep me\n");
    long live = file_size("live.prof");
    check(perfsupport_vmprof_enable("other.prof", "refusals", 1000) == PERFSUPPORT_ESTATE,
          "a second enable naming another file is refused");
    check(file_is("other.prof", "keep me\n"), "... and leaves that file as it was");
    check(perfsupport_vmprof_enable("live.prof", "refusals", 1000) == PERFSUPPORT_ESTATE,
          "a second enable naming the live profile is refused");
    check(file_size("live.prof") >= live && live >= 0, "... and does not truncate it");
    spin(stack, id, 0.2);
    uint64_t samples = 0;
    check(perfsupport_vmprof_disable(&samples) == 0 && samples > 0, "disable: samples written");

    perfsupport_profilers *prof = NULL;
    check(perfsupport_profilers_open(PERFSUPPORT_OUTPUT_PERF_MAP | PERFSUPPORT_OUTPUT_JITDUMP,
                                     "/nonexistent/dir", &prof) == PERFSUPPORT_EOPEN,
          "open with a missing jitdump directory fails");
    check(perfsupport_profilers_open(PERFSUPPORT_OUTPUT_PERF_MAP | PERFSUPPORT_OUTPUT_JITDUMP, ".",
                                     &prof) == 0,
          "a second open with a good directory works");
    perfsupport_region region = {.code = code, .size = sizeof code, .name = "capi::after_retry"};
    check(perfsupport_register(prof, &region, 1) == 0, "register through it");
    check(perfsupport_profilers_finish(prof) == 0, "finish");

    size_t reserved = 0;
    check(perfsupport_reserved_region_size(0, NULL, &reserved) == PERFSUPPORT_EINVAL,
          "reserved_region_size of 0 bytes is EINVAL");
}

static void trio(void) {
    perfsupport_profilers *prof = NULL;
    check(perfsupport_profilers_open(PERFSUPPORT_OUTPUT_PERF_MAP | PERFSUPPORT_OUTPUT_JITDUMP,
                                     "/nonexistent/dir", &prof) == PERFSUPPORT_EOPEN,
          "open with a missing jitdump directory fails");
    check(perfsupport_perf_map_init() == 0, "the trio's init works after it");
    check(perfsupport_write_perf_map_entry(code, sizeof code, "capi::trio_entry") == 0,
          "the trio writes");
    perfsupport_perf_map_fini();
}

static int wait_child(pid_t child) {
    int status = 0;
    return waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static void vmprof_fork(void) {
    perfsupport_shadow_stack *stack = NULL;
    uintptr_t parent_id = 0, child_id = 0;
    check(perfsupport_vmprof_attach_thread(&stack) == 0, "attach");
    check(perfsupport_vmprof_register_code("mj", "parent_work", 1, "fork.mj", &parent_id) == 0,
          "register the parent's code");
    check(perfsupport_vmprof_enable("parent.prof", "forker", 1000) == 0, "enable");
    spin(stack, parent_id, 0.2);
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        failures = 0;
        check(perfsupport_vmprof_is_enabled() == 0, "child: profiling is off");
        check(perfsupport_vmprof_disable(NULL) == PERFSUPPORT_ESTATE,
              "child: disable says not enabled");
        check(perfsupport_vmprof_register_code("mj", "child_work", 2, "fork.mj", &child_id) == 0,
              "child: register its code");
        check(perfsupport_vmprof_enable("child.prof", "forked", 1000) == 0, "child: enable");
        spin(stack, child_id, 0.4);
        uint64_t samples = 0;
        check(perfsupport_vmprof_disable(&samples) == 0 && samples > 0,
              "child: the forking thread, attached before the fork, is sampled");
        printf("child %d failed\n", failures);
        fflush(stdout);
        _exit(failures != 0);
    }
    check(child > 0, "fork");
    spin(stack, parent_id, 0.2);
    check(wait_child(child), "the child's checks pass");
    uint64_t samples = 0;
    check(perfsupport_vmprof_disable(&samples) == 0 && samples > 0, "parent: disable");
}

/* The child waits on `go` until the parent has written after the fork. */
static void perf_map_fork(void) {
    static const unsigned char before[16] = {0x90}, after[16] = {0x90}, mine[16] = {0x90};
    int go[2];
    check(pipe(go) == 0, "pipe");
    check(perfsupport_write_perf_map_entry(before, sizeof before, "parent::before_fork") == 0,
          "parent: a line before the fork");
    pid_t child = fork();
    if (child == 0) {
        failures = 0;
        char byte;
        close(go[1]);
        check(read(go[0], &byte, 1) == 1, "child: the parent wrote its later line");
        check(perfsupport_perf_map_after_fork_child() == 0, "child: after_fork_child");
        check(perfsupport_write_perf_map_entry(mine, sizeof mine, "child::own") == 0,
              "child: its own line");
        perfsupport_perf_map_fini();
        printf("child %d failed\n", failures);
        fflush(stdout);
        _exit(failures != 0);
    }
    close(go[0]);
    check(perfsupport_write_perf_map_entry(after, sizeof after, "parent::after_fork") == 0,
          "parent: a line after the fork");
    check(write(go[1], "g", 1) == 1, "parent: let the child go on");
    close(go[1]);
    check(wait_child(child), "the child's checks pass");
    perfsupport_perf_map_fini();
    printf("child pid %d\n", (int)child);
}

static void regions_fork(void) {
    perfsupport_profilers *prof = NULL;
    check(perfsupport_profilers_open(PERFSUPPORT_OUTPUT_PERF_MAP | PERFSUPPORT_OUTPUT_JITDUMP, ".",
                                     &prof) == 0,
          "open");
    perfsupport_region region = {.code = code, .size = sizeof code, .name = "parent::region"};
    check(perfsupport_register(prof, &region, 1) == 0, "parent: register");
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        failures = 0;
        check(perfsupport_profilers_after_fork_child(prof) == 0, "child: after_fork_child");
        region.name = "child::region";
        check(perfsupport_register(prof, &region, 1) == 0,
              "child: register works (the jitdump stops, the map goes on)");
        check(perfsupport_profilers_finish(prof) == 0, "child: finish");
        printf("child %d failed\n", failures);
        fflush(stdout);
        _exit(failures != 0);
    }
    check(wait_child(child), "the child's checks pass");
    check(perfsupport_profilers_finish(prof) == 0, "parent: finish");
    printf("child pid %d\n", (int)child);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "refusals") == 0) refusals();
    else if (strcmp(mode, "trio") == 0) trio();
    else if (strcmp(mode, "vmprof") == 0) vmprof_fork();
    else if (strcmp(mode, "perfmap") == 0) perf_map_fork();
    else if (strcmp(mode, "regions") == 0) regions_fork();
    else {
        fprintf(stderr, "unknown mode '%s'\n", mode);
        return 2;
    }
    printf("pid %d\n%d failed\n", (int)getpid(), failures);
    return failures != 0;
}
