// SPDX-License-Identifier: MIT
/*
 * kvs-probe - escape attempts, run inside kva-sandbox by escape.sh and
 * guest-limits.sh. Each subcommand tries one thing and prints one line:
 *   BLOCKED <what>: <the kernel's reason>   (exit 0)
 *   ESCAPED <what>                          (exit 99)
 * A few subcommands are workloads (spin, daemon, membomb, forkbomb) whose
 * verdict the launcher gives (timeout, OOM, pids). Static, so it needs
 * nothing inside the sandbox but itself.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int blocked(const char *what, int err)
{
	printf("BLOCKED %s: %s\n", what, strerror(err));
	return 0;
}

static int escaped(const char *what)
{
	printf("ESCAPED %s\n", what);
	return 99;
}

/* 0 when the call was refused, 1 when it went through */
static int tried(const char *what, long rc)
{
	if (rc < 0) {
		printf("  %s: %s\n", what, strerror(errno));
		return 0;
	}
	printf("  %s: SUCCEEDED\n", what);
	return 1;
}

static int do_read(const char *path)
{
	char b;
	int fd = open(path, O_RDONLY);

	if (fd < 0)
		return blocked("read", errno);
	if (read(fd, &b, 1) < 0)
		return blocked("read", errno);
	return escaped("read");
}

static int do_write(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	if (fd < 0)
		return blocked("write", errno);
	if (write(fd, "x", 1) != 1)
		return blocked("write", errno);
	close(fd);
	return escaped("write");
}

static int do_symlink(const char *target)
{
	char b;
	int fd;

	unlink("lnk");
	if (symlink(target, "lnk"))
		return blocked("symlink", errno);
	fd = open("lnk", O_RDONLY);
	if (fd < 0)
		return blocked("symlink", errno);
	if (read(fd, &b, 1) < 0)
		return blocked("symlink", errno);
	return escaped("symlink");
}

static int do_connect(const char *host, int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	int s = socket(AF_INET, SOCK_STREAM, 0);

	if (s < 0)
		return blocked("connect", errno);
	inet_pton(AF_INET, host, &sa.sin_addr);
	if (connect(s, (struct sockaddr *)&sa, sizeof(sa)))
		return blocked("connect", errno);
	return escaped("connect");
}

static int do_forkbomb(int max)
{
	int n = 0;

	for (; n < max; n++) {
		pid_t p = fork();

		if (p == 0) {
			pause();
			_exit(0);
		}
		if (p < 0) {
			printf("BLOCKED fork: %s after %d processes\n", strerror(errno), n);
			fflush(stdout);
			kill(0, SIGKILL);	/* our process group: the bomb itself */
			return 0;
		}
	}
	printf("ESCAPED fork: %d processes\n", n);
	fflush(stdout);
	kill(0, SIGKILL);
	return 99;
}

static int do_membomb(int max_mb)
{
	int mb;

	for (mb = 0; mb < max_mb; mb++) {
		char *p = malloc(1 << 20);

		if (!p) {
			printf("BLOCKED memory: malloc failed after %d MiB\n", mb);
			return 0;
		}
		memset(p, 0x5a, 1 << 20);
	}
	printf("ESCAPED memory: %d MiB\n", mb);
	return 99;
}

static int do_ptrace(void)
{
	pid_t sib = fork();
	int ok = 0;
	char buf[8] = "x";
	struct iovec local = { buf, 1 }, remote = { buf, 1 };

	if (sib == 0) {
		pause();
		_exit(0);
	}
	if (sib < 0)
		return blocked("ptrace (no sibling)", errno);
	ok |= tried("ptrace(PTRACE_ATTACH, sibling)", ptrace(PTRACE_ATTACH, sib, 0, 0));
	ok |= tried("ptrace(PTRACE_SEIZE, sibling)", ptrace(PTRACE_SEIZE, sib, 0, 0));
	ok |= tried("process_vm_writev(sibling)",
		    syscall(SYS_process_vm_writev, sib, &local, 1, &remote, 1, 0));
	kill(sib, SIGKILL);
	waitpid(sib, NULL, 0);
	if (ok)
		return escaped("ptrace");
	return blocked("ptrace", EPERM);
}

static int do_syscalls(void)
{
	union bpf_attr attr;
	int ok = 0, fd;

	memset(&attr, 0, sizeof(attr));
	attr.map_type = BPF_MAP_TYPE_ARRAY;
	attr.key_size = 4;
	attr.value_size = 4;
	attr.max_entries = 1;
	ok |= tried("mount tmpfs", mount("tmpfs", "/tmp", "tmpfs", 0, NULL));
	ok |= tried("mount --bind / .", mount("/", ".", NULL, MS_BIND, NULL));
	ok |= tried("umount .", umount2(".", MNT_DETACH));
	ok |= tried("unshare(CLONE_NEWUSER)", unshare(CLONE_NEWUSER));
	ok |= tried("unshare(CLONE_NEWNS)", unshare(CLONE_NEWNS));
	fd = open("/proc/1/ns/mnt", O_RDONLY);
	ok |= tried("setns(mnt of pid 1)", fd < 0 ? fd : setns(fd, 0));
	ok |= tried("clone(CLONE_NEWUSER)",
		    syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0) == 0 ? (_exit(0), 0) :
		    -1);
	ok |= tried("chroot", chroot("/tmp"));
	ok |= tried("pivot_root", syscall(SYS_pivot_root, "/tmp", "/tmp"));
	ok |= tried("bpf(BPF_MAP_CREATE)", syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof(attr)));
	ok |= tried("init_module", syscall(SYS_init_module, "", 0, ""));
	ok |= tried("finit_module", syscall(SYS_finit_module, 0, "", 0));
	ok |= tried("delete_module", syscall(SYS_delete_module, "kvarena", 0));
	ok |= tried("kexec_load", syscall(SYS_kexec_load, 0, 0, 0, 0));
	ok |= tried("keyctl", syscall(SYS_keyctl, 0, 0, 0, 0, 0));
	ok |= tried("perf_event_open", syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0));
	ok |= tried("userfaultfd", syscall(SYS_userfaultfd, 0));
	ok |= tried("io_uring_setup", syscall(SYS_io_uring_setup, 1, NULL));
	ok |= tried("reboot", syscall(SYS_reboot, 0, 0, 0, NULL));
	ok |= tried("sethostname", sethostname("x", 1));
	if (ok)
		return escaped("syscalls");
	return blocked("syscalls", EPERM);
}

static int do_kill(pid_t pid)
{
	int ok = 0;

	ok |= tried("kill(pid, SIGKILL)", kill(pid, SIGKILL));
	ok |= tried("kill(-pid, SIGKILL)", kill(-pid, SIGKILL));
	if (ok)
		return escaped("kill");
	return blocked("kill", ESRCH);
}

static int do_procsys(void)
{
	int ok = 0, fd;

	fd = open("/proc/sys/kernel/hostname", O_WRONLY);
	ok |= tried("open /proc/sys/kernel/hostname for writing", fd);
	fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
	ok |= tried("open /proc/sys/vm/drop_caches for writing", fd);
	fd = open("/proc/sysrq-trigger", O_WRONLY);
	ok |= tried("open /proc/sysrq-trigger for writing", fd);
	fd = open("/sys/kernel/uevent_helper", O_WRONLY);
	ok |= tried("open /sys/kernel/uevent_helper for writing", fd);
	ok |= tried("mkdir /sys", mkdir("/sys", 0755));
	if (ok)
		return escaped("procsys");
	return blocked("procsys", EACCES);
}

static int do_euid(void)
{
	printf("%s euid=%d uid=%d\n", geteuid() == 0 ? "ESCAPED setuid:" : "BLOCKED setuid:",
	       (int)geteuid(), (int)getuid());
	return geteuid() == 0 ? 99 : 0;
}

static int do_exec(char **argv)
{
	execv(argv[0], argv);
	return blocked("exec", errno);
}

/* A tool that forks a daemon and exits: the daemon writes a heartbeat to
 * FILE every 50 ms, forever. */
static int do_daemon(const char *file)
{
	pid_t p = fork();

	if (p < 0)
		return blocked("daemon", errno);
	if (p == 0) {
		setsid();
		if (fork() != 0)
			_exit(0);
		for (;;) {
			int fd = open(file, O_WRONLY | O_CREAT | O_APPEND, 0644);

			if (fd >= 0) {
				if (write(fd, ".", 1) < 0)
					_exit(1);
				close(fd);
			}
			usleep(50000);
		}
	}
	waitpid(p, NULL, 0);
	/* exit only once the daemon is surely running */
	for (int i = 0; i < 200; i++) {
		struct stat st;

		if (stat(file, &st) == 0 && st.st_size > 0)
			break;
		usleep(10000);
	}
	printf("daemon started\n");
	return 0;
}

static int do_spin(void)
{
	volatile unsigned long x = 0;

	for (;;)
		x++;
	return 0;
}

/* Spin for SEC seconds of wall time; print the CPU time it got. */
static int do_burn(double sec)
{
	struct timespec a, b, c;
	volatile unsigned long x = 0;

	clock_gettime(CLOCK_MONOTONIC, &a);
	do {
		for (int i = 0; i < 100000; i++)
			x++;
		clock_gettime(CLOCK_MONOTONIC, &b);
	} while (b.tv_sec - a.tv_sec + (b.tv_nsec - a.tv_nsec) / 1e9 < sec);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c);
	printf("burn wall=%.2f cpu=%.2f\n", sec, c.tv_sec + c.tv_nsec / 1e9);
	return 0;
}

static int do_output(long bytes)
{
	static char buf[65536];

	memset(buf, 'y', sizeof(buf));
	while (bytes > 0) {
		ssize_t n = write(1, buf, bytes < (long)sizeof(buf) ? bytes : (long)sizeof(buf));

		if (n <= 0)
			return 1;
		bytes -= n;
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *c = argc > 1 ? argv[1] : "";

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(c, "read") && argc == 3)
		return do_read(argv[2]);
	if (!strcmp(c, "write") && argc == 3)
		return do_write(argv[2]);
	if (!strcmp(c, "symlink") && argc == 3)
		return do_symlink(argv[2]);
	if (!strcmp(c, "connect") && argc == 4)
		return do_connect(argv[2], atoi(argv[3]));
	if (!strcmp(c, "forkbomb") && argc == 3)
		return do_forkbomb(atoi(argv[2]));
	if (!strcmp(c, "membomb") && argc == 3)
		return do_membomb(atoi(argv[2]));
	if (!strcmp(c, "ptrace"))
		return do_ptrace();
	if (!strcmp(c, "syscalls"))
		return do_syscalls();
	if (!strcmp(c, "kill") && argc == 3)
		return do_kill((pid_t)atoi(argv[2]));
	if (!strcmp(c, "procsys"))
		return do_procsys();
	if (!strcmp(c, "euid"))
		return do_euid();
	if (!strcmp(c, "exec") && argc >= 3)
		return do_exec(argv + 2);
	if (!strcmp(c, "daemon") && argc == 3)
		return do_daemon(argv[2]);
	if (!strcmp(c, "spin"))
		return do_spin();
	if (!strcmp(c, "burn") && argc == 3)
		return do_burn(atof(argv[2]));
	if (!strcmp(c, "output") && argc == 3)
		return do_output(atol(argv[2]));
	fprintf(stderr, "usage: kvs-probe read|write|symlink PATH | connect HOST PORT | "
		"forkbomb N | membomb MIB | ptrace | syscalls | kill PID | procsys | euid | "
		"exec PATH [ARGS] | daemon FILE | spin | burn SEC | output BYTES\n");
	return 2;
}
