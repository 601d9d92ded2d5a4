// SPDX-License-Identifier: MIT
/*
 * kvs-probe - escape attempts, run inside kva-sandbox by escape.sh and
 * guest-limits.sh. Each subcommand tries one thing and prints one line:
 *   BLOCKED <what>: <the kernel's reason>   (exit 0)
 *   ESCAPED <what>                          (exit 99)
 * A few subcommands are workloads (spin, daemon, membomb, forkbomb, memfd
 * with a memory controller, fill, deep) whose verdict the launcher or the
 * test gives (timeout, OOM, pids, the host's view). Static, so it needs
 * nothing inside the sandbox but itself.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/netlink.h>
#include <linux/vm_sockets.h>
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
#include <sys/un.h>
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

/* Memory the launcher's RLIMIT_AS does not see: a memfd of MIB MiB,
 * touched. With a memory controller it is charged to the run's cgroup
 * (OOM there); without one the launcher must not let it be made. */
static int do_memfd(int mib)
{
	static char page[1 << 20];
	int fd = (int)syscall(SYS_memfd_create, "kvs-probe", 0);

	if (fd < 0)
		return blocked("memfd", errno);
	memset(page, 0x5a, sizeof(page));
	for (int i = 0; i < mib; i++)
		if (write(fd, page, sizeof(page)) != (ssize_t)sizeof(page))
			return blocked("memfd", errno);
	printf("ESCAPED memfd: %d MiB held outside RLIMIT_AS\n", mib);
	return 99;
}

/* Code that is on no exec path: this program copied into a memfd, run
 * with fexecve (execveat AT_EMPTY_PATH) and through /proc/self/fd. The
 * copy, if it runs, says ESCAPED. */
static int do_memfdexec(const char *self)
{
	static char buf[1 << 16];
	char *av[] = { (char *)self, "memfd-ran", NULL }, *env[] = { NULL };
	char path[64];
	int in, fd, ok = 0;
	ssize_t n;

	fd = (int)syscall(SYS_memfd_create, "kvs-exec", 1u /* MFD_CLOEXEC */);
	if (fd < 0)
		return blocked("memfd exec (memfd_create)", errno);
	in = open("/proc/self/exe", O_RDONLY);
	if (in < 0)
		return blocked("memfd exec (reading itself)", errno);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write(fd, buf, (size_t)n) != n)
			return blocked("memfd exec (write)", errno);
	close(in);
	fchmod(fd, 0755);
	{
		pid_t p = fork();
		int st = 0;

		if (p == 0) {
			syscall(SYS_execveat, fd, "", av, env, AT_EMPTY_PATH);
			printf("  execveat(memfd, AT_EMPTY_PATH): %s\n", strerror(errno));
			_exit(0);
		}
		waitpid(p, &st, 0);
		ok |= WIFEXITED(st) && WEXITSTATUS(st) == 99;
	}
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	{
		/* without CLOEXEC for this one: the path must stay valid */
		int fd2 = dup(fd);
		pid_t p;
		int st = 0;

		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd2);
		p = fork();
		if (p == 0) {
			execve(path, av, env);
			printf("  execve(%s): %s\n", path, strerror(errno));
			_exit(0);
		}
		waitpid(p, &st, 0);
		ok |= WIFEXITED(st) && WEXITSTATUS(st) == 99;
	}
	if (ok)
		return escaped("memfd exec");
	return blocked("memfd exec", EACCES);
}

/* Socket families beyond AF_UNIX (and AF_INET/AF_INET6 when the policy
 * grants the network: "sockets net", where they must work): AF_VSOCK is
 * not network-namespaced at all. */
static int do_sockets(int net)
{
	static const struct { int fam, type, proto; const char *name; } f[] = {
		{ AF_VSOCK, SOCK_STREAM, 0, "AF_VSOCK" },
		{ AF_ALG, SOCK_SEQPACKET, 0, "AF_ALG" },
		{ AF_PACKET, SOCK_DGRAM, 0, "AF_PACKET" },
		{ AF_KEY, SOCK_RAW, 2, "AF_KEY" },
		{ AF_TIPC, SOCK_RDM, 0, "AF_TIPC" },
		{ AF_RDS, SOCK_SEQPACKET, 0, "AF_RDS" },
		{ AF_XDP, SOCK_RAW, 0, "AF_XDP" },
		{ AF_CAN, SOCK_RAW, 1, "AF_CAN" },
		{ AF_LLC, SOCK_DGRAM, 0, "AF_LLC" },
		{ AF_BLUETOOTH, SOCK_RAW, 0, "AF_BLUETOOTH" },
		{ AF_NETLINK, SOCK_RAW, NETLINK_AUDIT, "AF_NETLINK/AUDIT" },
		{ AF_NETLINK, SOCK_RAW, NETLINK_KOBJECT_UEVENT, "AF_NETLINK/UEVENT" },
		{ 46 + 100, SOCK_STREAM, 0, "family 146" },
		{ AF_INET, SOCK_STREAM, 0, "AF_INET" },
		{ AF_INET6, SOCK_DGRAM, 0, "AF_INET6" },
	};
	int ok = 0;

	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
		int s = socket(f[i].fam, f[i].type, f[i].proto);

		if (net && (f[i].fam == AF_INET || f[i].fam == AF_INET6)) {
			if (s < 0) {
				printf("  %s refused with the network granted: %s\n", f[i].name,
				       strerror(errno));
				return 98;
			}
			close(s);
			continue;
		}

		if (s >= 0 && f[i].fam == AF_VSOCK) {
			struct sockaddr_vm vm = { .svm_family = AF_VSOCK, .svm_port = 4242,
						  .svm_cid = VMADDR_CID_ANY };

			if (bind(s, (struct sockaddr *)&vm, sizeof(vm)) == 0)
				printf("  AF_VSOCK: bound port 4242\n");
		}
		ok |= tried(f[i].name, s);
		if (s >= 0)
			close(s);
	}
	{
		int sv[2];

		ok |= tried("socketpair(AF_TIPC)", socketpair(AF_TIPC, SOCK_STREAM, 0, sv));
	}
	if (ok)
		return escaped("sockets");
	return blocked("sockets", EAFNOSUPPORT);
}

/* An abstract Unix socket name taken in another run: seen from this one
 * only if the two share a network namespace. Binds @NAME (ESCAPED when
 * another run holds it), writes "bound" to ./NAME.bound, holds it SECS. */
static int do_squat(const char *name, int secs)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name));
	int s = socket(AF_UNIX, SOCK_STREAM, 0);
	char mark[300];
	FILE *f;

	if (s < 0)
		return blocked("squat (socket)", errno);
	if (strlen(name) > 100)
		return 2;
	memcpy(sa.sun_path + 1, name, strlen(name));
	if (bind(s, (struct sockaddr *)&sa, len)) {
		if (errno == EADDRINUSE) {
			printf("ESCAPED abstract: @%s is held by another run\n", name);
			return 99;
		}
		return blocked("squat (bind)", errno);
	}
	snprintf(mark, sizeof(mark), "%s.bound", name);
	f = fopen(mark, "w");
	if (f)
		fclose(f);
	printf("BLOCKED abstract: @%s was free in this run's network namespace\n", name);
	fflush(stdout);
	sleep((unsigned int)secs);
	return 0;
}

/* A new user namespace from inside: seccomp refuses unshare, and the
 * run's own user namespace allows no nested one. */
static int do_userns(void)
{
	char v[32] = "";
	int fd = open("/proc/sys/user/max_user_namespaces", O_RDONLY);
	ssize_t n = fd < 0 ? -1 : read(fd, v, sizeof(v) - 1);

	if (n > 0)
		v[n] = 0;
	v[strcspn(v, "\n")] = 0;
	if (strcmp(v, "0")) {
		printf("ESCAPED userns: max_user_namespaces is '%s' in the run's user namespace\n", v);
		return 99;
	}
	printf("BLOCKED userns: max_user_namespaces=0\n");
	return 0;
}

/* The host path of the work directory in the run's mountinfo. */
static int do_mountinfo(const char *host_path)
{
	static char buf[1 << 16];
	int fd = open("/proc/self/mountinfo", O_RDONLY);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);

	if (n < 0)
		return blocked("mountinfo", errno);
	buf[n] = 0;
	if (strstr(buf, host_path)) {
		printf("ESCAPED mountinfo: it names %s\n", host_path);
		return 99;
	}
	printf("BLOCKED mountinfo: no host path of the work directory\n");
	return 0;
}

/* setuid/setgid bits on files the tool makes in its work directory. */
static int do_suidfile(void)
{
	struct stat st;
	int ok = 0, fd;

	unlink("suid-a");
	unlink("suid-b");
	fd = open("suid-a", O_WRONLY | O_CREAT, 0755);
	if (fd >= 0)
		close(fd);
	ok |= tried("chmod 4755", chmod("suid-a", 04755)) && !stat("suid-a", &st) &&
	      (st.st_mode & S_ISUID);
	ok |= tried("chmod 2755", chmod("suid-a", 02755)) && !stat("suid-a", &st) &&
	      (st.st_mode & S_ISGID);
	fd = open("suid-b", O_WRONLY | O_CREAT, 06755);
	ok |= tried("open(O_CREAT, 06755)", fd) && !fstat(fd, &st) &&
	      (st.st_mode & (S_ISUID | S_ISGID));
	ok |= tried("mkdir 2755", mkdir("sgid-dir", 02755)) && !stat("sgid-dir", &st) &&
	      (st.st_mode & S_ISGID);
	if (ok)
		return escaped("suidfile");
	return blocked("suidfile", EPERM);
}

/* Fill the work directory: at most its size cap. */
static int do_fill(int mib)
{
	static char chunk[1 << 20];
	int fd = open("fill", O_WRONLY | O_CREAT | O_TRUNC, 0644), i;

	if (fd < 0)
		return blocked("fill", errno);
	memset(chunk, 'f', sizeof(chunk));
	for (i = 0; i < mib; i++)
		if (write(fd, chunk, sizeof(chunk)) != (ssize_t)sizeof(chunk)) {
			printf("BLOCKED fill: %s after %d MiB\n", strerror(errno), i);
			return 0;
		}
	printf("ESCAPED fill: wrote %d MiB\n", mib);
	return 99;
}

/* A directory tree DEPTH deep in the work directory (relative paths, one
 * level at a time), for the launcher's cleanup. */
static int do_deep(int depth)
{
	for (int i = 0; i < depth; i++)
		if (mkdir("d", 0700) || chdir("d"))
			return blocked("deep", errno);
	if (close(open("leaf", O_WRONLY | O_CREAT, 0600)))
		return blocked("deep", errno);
	printf("deep: %d levels\n", depth);
	return 0;
}

int main(int argc, char **argv)
{
	const char *c = argc > 1 ? argv[1] : "";

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(c, "memfd-ran")) {
		printf("ESCAPED memfd exec: code from a memfd ran\n");
		return 99;
	}
	if (!strcmp(c, "memfd") && argc == 3)
		return do_memfd(atoi(argv[2]));
	if (!strcmp(c, "memfdexec"))
		return do_memfdexec(argv[0]);
	if (!strcmp(c, "sockets"))
		return do_sockets(argc == 3 && !strcmp(argv[2], "net"));
	if (!strcmp(c, "squat") && argc == 4)
		return do_squat(argv[2], atoi(argv[3]));
	if (!strcmp(c, "userns"))
		return do_userns();
	if (!strcmp(c, "mountinfo") && argc == 3)
		return do_mountinfo(argv[2]);
	if (!strcmp(c, "suidfile"))
		return do_suidfile();
	if (!strcmp(c, "fill") && argc == 3)
		return do_fill(atoi(argv[2]));
	if (!strcmp(c, "deep") && argc == 3)
		return do_deep(atoi(argv[2]));
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
		"exec PATH [ARGS] | daemon FILE | spin | burn SEC | output BYTES | memfd MIB |\n"
		"memfdexec | sockets [net] | squat NAME SECS | userns | mountinfo HOSTPATH | suidfile |\n"
		"fill MIB | deep N\n");
	return 2;
}
