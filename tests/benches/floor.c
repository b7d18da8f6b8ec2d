/* The floor of a sandboxed invocation: what the kernel work cordon needs costs, and nothing else.
 *
 *   floor bare  N                       vfork + exec /bin/true + wait, N times
 *   floor floor N RULES BPF CGROUP...   the same, the child first joining each CGROUP (an open
 *                                       cgroup.procs), enforcing a landlock ruleset with the
 *                                       rules in RULES ("ACCESS PATH" lines, the first line the
 *                                       handled fs and net access: "HANDLED_FS HANDLED_NET
 *                                       SCOPED"), no_new_privs, then the seccomp program in BPF
 *                                       (raw struct sock_filter array, cordon's own program)
 *
 * Prints the p50, p90 and p99 of one invocation (microseconds) and the CPU time per invocation
 * (parent and children, microseconds). Built and run by `cargo bench --bench spawn` (gcc -O2);
 * the ruleset is built per call, as cordond does (the /proc/self rule must name the child).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/landlock.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_RULES 256
#define MAX_CGROUPS 8

/* Declared here: a distribution's headers may predate the net and scope fields. */
static struct {
    uint64_t handled_access_fs, handled_access_net, scoped;
} handled;
static uint64_t rule_access[MAX_RULES];
static int rule_fd[MAX_RULES];
static int rules;
static int cgroup_fd[MAX_CGROUPS];
static int cgroups;
static struct sock_fprog prog;
static int floor_mode;
static char *const child_argv[] = {"/bin/true", NULL};
static char *const child_env[] = {"PATH=/usr/bin:/bin", NULL};

static int child(void *unused) {
    (void)unused;
    if (floor_mode) {
        setsid();
        for (int i = 0; i < cgroups; i++)
            if (write(cgroup_fd[i], "0", 1) != 1) _exit(120);
        int rs = syscall(SYS_landlock_create_ruleset, &handled, sizeof handled, 0);
        if (rs < 0) _exit(121);
        for (int i = 0; i < rules; i++) {
            struct landlock_path_beneath_attr a = {.allowed_access = rule_access[i], .parent_fd = rule_fd[i]};
            if (syscall(SYS_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &a, 0) < 0) _exit(122);
        }
        int self = open("/proc/self", O_PATH | O_CLOEXEC | O_DIRECTORY);
        struct landlock_path_beneath_attr a = {
            .allowed_access = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR, .parent_fd = self};
        if (self < 0 || syscall(SYS_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &a, 0) < 0) _exit(123);
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) _exit(124);
        if (syscall(SYS_landlock_restrict_self, rs, 0) < 0) _exit(125);
        close(rs);
        close(self);
        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0) _exit(126);
    }
    execve("/bin/true", child_argv, child_env);
    _exit(127);
}

static void load(const char *rules_path, const char *bpf_path) {
    FILE *f = fopen(rules_path, "r");
    if (!f) { perror(rules_path); exit(2); }
    unsigned long long fs, net, scoped;
    if (fscanf(f, "%llx %llx %llx\n", &fs, &net, &scoped) != 3) { fprintf(stderr, "bad rules header\n"); exit(2); }
    handled.handled_access_fs = fs;
    handled.handled_access_net = net;
    handled.scoped = scoped;
    char path[4096];
    unsigned long long access;
    while (rules < MAX_RULES && fscanf(f, "%llx %4095s\n", &access, path) == 2) {
        rule_fd[rules] = open(path, O_PATH | O_CLOEXEC);
        if (rule_fd[rules] < 0) continue;
        rule_access[rules++] = access;
    }
    fclose(f);
    f = fopen(bpf_path, "rb");
    if (!f) { perror(bpf_path); exit(2); }
    static struct sock_filter filter[4096];
    size_t n = fread(filter, sizeof filter[0], 4096, f);
    fclose(f);
    prog.len = (unsigned short)n;
    prog.filter = filter;
}

static int cmp(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static long cpu_us(int who) {
    struct rusage r;
    getrusage(who, &r);
    return (r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1000000L + r.ru_utime.tv_usec + r.ru_stime.tv_usec;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: floor bare|floor N [RULES BPF CGROUP_PROCS...]\n"); return 2; }
    floor_mode = strcmp(argv[1], "floor") == 0;
    int n = atoi(argv[2]);
    if (floor_mode) {
        if (argc < 5) { fprintf(stderr, "floor needs RULES and BPF\n"); return 2; }
        load(argv[3], argv[4]);
        for (int i = 5; i < argc && cgroups < MAX_CGROUPS; i++) {
            cgroup_fd[cgroups] = open(argv[i], O_WRONLY | O_CLOEXEC);
            if (cgroup_fd[cgroups] < 0) { perror(argv[i]); return 2; }
            cgroups++;
        }
    }
    long *samples = calloc(n, sizeof(long));
    static char stack[256 * 1024];
    long cpu0 = cpu_us(RUSAGE_SELF) + cpu_us(RUSAGE_CHILDREN);
    for (int i = 0; i < n; i++) {
        long t = now_ns();
        pid_t pid = clone(child, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, NULL);
        if (pid < 0) { perror("clone"); return 1; }
        int status;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "child failed: status %d\n", status);
            return 1;
        }
        samples[i] = now_ns() - t;
    }
    long cpu = cpu_us(RUSAGE_SELF) + cpu_us(RUSAGE_CHILDREN) - cpu0;
    qsort(samples, n, sizeof(long), cmp);
    printf("%ld %ld %ld %ld\n", samples[n / 2] / 1000, samples[n * 9 / 10] / 1000, samples[n * 99 / 100] / 1000,
           cpu / n);
    return 0;
}
