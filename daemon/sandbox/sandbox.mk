# SPDX-License-Identifier: MIT
# sandbox.mk - the tool-run launcher (daemon/sandbox/): libkvsandbox, the
# kva-sandbox CLI, its escape suite and its benchmark. Included from the
# top-level Makefile with -include; paths are relative to the repo root.
# Needs: libseccomp-dev libinih-dev libjansson-dev gcc mandoc, node and npm
# for the MCP lane (scripts/deps.sh check).
# Defines only SANDBOX_* variables and the targets
#   sandbox sandbox-npm check-sandbox check-sandbox-guest bench-sandbox
#   fuzz-mcp check-sandbox-mcp check-sandbox-fuzz
# Everything it writes goes under build/.

SANDBOX_SRC    := daemon/sandbox
SANDBOX_OUT    := build/sandbox
SANDBOX_CC     ?= gcc
SANDBOX_CFLAGS := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -O2 -g -I$(SANDBOX_SRC)
SANDBOX_SAN    := -O1 -fsanitize=address,undefined -fno-sanitize-recover=all \
                  -fno-omit-frame-pointer
SANDBOX_LIBS   := -lseccomp -linih -ljansson -lpthread
SANDBOX_NAMES  := policy spawn spawner cgroup seccomp landlock netns workdir tools util mcp \
                  mcp_wire
SANDBOX_HDRS   := $(wildcard $(SANDBOX_SRC)/*.h)
SANDBOX_OBJS   := $(SANDBOX_NAMES:%=$(SANDBOX_OUT)/obj/%.o)
SANDBOX_SOBJS  := $(SANDBOX_NAMES:%=$(SANDBOX_OUT)/san/%.o)
SANDBOX_LIB    := $(SANDBOX_OUT)/libkvsandbox.a
SANDBOX_SLIB   := $(SANDBOX_OUT)/libkvsandbox-san.a
SANDBOX_CLI    := build/bin/kva-sandbox
# the CLI under ASan/UBSan, which the escape suite drives
SANDBOX_CLI_SAN := $(SANDBOX_OUT)/kva-sandbox-san
SANDBOX_PROBE  := $(SANDBOX_OUT)/kvs-probe
SANDBOX_TEST   := $(SANDBOX_OUT)/test_sandbox
SANDBOX_BENCH  := $(SANDBOX_OUT)/kvs-bench
SANDBOX_MCPT   := $(SANDBOX_OUT)/test_mcp
SANDBOX_FAKE   := $(SANDBOX_OUT)/kvs-mcp-fake
SANDBOX_MCPCLI := $(SANDBOX_OUT)/kvs-mcp-cli
# the MCP reader's libFuzzer harness (clang only)
SANDBOX_FUZZ   := $(SANDBOX_OUT)/fuzz_mcp
SANDBOX_FUZZCC ?= clang

.PHONY: sandbox sandbox-npm check-sandbox check-sandbox-guest bench-sandbox fuzz-mcp \
	check-sandbox-mcp check-sandbox-fuzz

# the npm MCP servers in $(SANDBOX_OUT)/npm (installed once; kvarenad's
# test_orch runs them too)
sandbox-npm:
	@tests/sandbox/mcp-npm.sh --install

# `make` (the top-level tools target) builds the CLI too
tools: $(SANDBOX_CLI)

sandbox: $(SANDBOX_LIB) $(SANDBOX_SLIB) $(SANDBOX_CLI) $(SANDBOX_CLI_SAN) $(SANDBOX_PROBE) \
	$(SANDBOX_TEST) $(SANDBOX_BENCH) $(SANDBOX_MCPT) $(SANDBOX_FAKE) $(SANDBOX_MCPCLI)

$(SANDBOX_OBJS): $(SANDBOX_OUT)/obj/%.o: $(SANDBOX_SRC)/%.c $(SANDBOX_HDRS)
	@mkdir -p $(@D)
	$(SANDBOX_CC) $(SANDBOX_CFLAGS) -c $< -o $@

$(SANDBOX_SOBJS): $(SANDBOX_OUT)/san/%.o: $(SANDBOX_SRC)/%.c $(SANDBOX_HDRS)
	@mkdir -p $(@D)
	$(SANDBOX_CC) $(SANDBOX_CFLAGS) $(SANDBOX_SAN) -c $< -o $@

$(SANDBOX_LIB): $(SANDBOX_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(SANDBOX_SLIB): $(SANDBOX_SOBJS)
	@rm -f $@
	ar rcs $@ $^

$(SANDBOX_CLI): $(SANDBOX_SRC)/kva-sandbox.c $(SANDBOX_LIB)
	@mkdir -p $(@D)
	$(SANDBOX_CC) $(SANDBOX_CFLAGS) $< $(SANDBOX_LIB) -o $@ $(SANDBOX_LIBS)

$(SANDBOX_CLI_SAN): $(SANDBOX_SRC)/kva-sandbox.c $(SANDBOX_SLIB)
	@mkdir -p $(@D)
	$(SANDBOX_CC) $(SANDBOX_CFLAGS) $(SANDBOX_SAN) $< $(SANDBOX_SLIB) -o $@ $(SANDBOX_LIBS)

# the escape attempts run inside the sandbox: static, so the guest lane
# needs nothing but the binary
$(SANDBOX_PROBE): tests/sandbox/kvs-probe.c
	@mkdir -p $(@D)
	$(SANDBOX_CC) $(SANDBOX_CFLAGS) -static $< -o $@

$(SANDBOX_TEST): tests/sandbox/test_sandbox.c $(SANDBOX_SLIB) $(SANDBOX_HDRS)
	@mkdir -p $(@D)
	$(SANDBOX_CC) $(SANDBOX_CFLAGS) $(SANDBOX_SAN) $< $(SANDBOX_SLIB) -o $@ $(SANDBOX_LIBS)

$(SANDBOX_MCPT): tests/sandbox/test_mcp.c $(SANDBOX_SLIB) $(SANDBOX_HDRS)
	@mkdir -p $(@D)
	$(SANDBOX_CC) $(SANDBOX_CFLAGS) $(SANDBOX_SAN) $< $(SANDBOX_SLIB) -o $@ $(SANDBOX_LIBS)

$(SANDBOX_MCPCLI): tests/sandbox/kvs-mcp-cli.c $(SANDBOX_SLIB) $(SANDBOX_HDRS)
	@mkdir -p $(@D)
	$(SANDBOX_CC) $(SANDBOX_CFLAGS) $(SANDBOX_SAN) $< $(SANDBOX_SLIB) -o $@ $(SANDBOX_LIBS)

$(SANDBOX_FAKE): tests/sandbox/kvs-mcp-fake.c
	@mkdir -p $(@D)
	$(SANDBOX_CC) $(SANDBOX_CFLAGS) -static $< -o $@

fuzz-mcp: $(SANDBOX_FUZZ)
$(SANDBOX_FUZZ): tests/sandbox/fuzz_mcp.c $(SANDBOX_SRC)/mcp_wire.c $(SANDBOX_SRC)/mcp_wire.h
	@mkdir -p $(@D)
	$(SANDBOX_FUZZCC) -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -g -O1 -I$(SANDBOX_SRC) \
		-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
		tests/sandbox/fuzz_mcp.c $(SANDBOX_SRC)/mcp_wire.c -o $@ -ljansson

# The MCP reader alone (also the mutation lane's mcp group): the client
# against the hostile fake server, 20,000 inputs of the fuzz harness.
check-sandbox-mcp: $(SANDBOX_MCPT) $(SANDBOX_FAKE) $(SANDBOX_FUZZ)
	@ASAN_OPTIONS=detect_leaks=1 $(SANDBOX_MCPT) $(SANDBOX_FAKE)
	@tests/sandbox/fuzz-mcp.sh 20000

# The hardening lane's MCP part: a million inputs (FUZZ_MCP_RUNS) through
# the reader, no ASan/UBSan report (Documentation/hardening.md).
FUZZ_MCP_RUNS ?= 1000000
check-sandbox-fuzz: $(SANDBOX_FUZZ)
	@nice -n 10 tests/sandbox/fuzz-mcp.sh $(FUZZ_MCP_RUNS)

$(SANDBOX_BENCH): tools/bench/kvs-bench.c $(SANDBOX_LIB) $(SANDBOX_HDRS)
	@mkdir -p $(@D)
	$(SANDBOX_CC) $(SANDBOX_CFLAGS) $< $(SANDBOX_LIB) -o $@ $(SANDBOX_LIBS)

# Host lane: the API (test_sandbox), the MCP client against a hostile fake
# server (test_mcp) and the real npm servers (mcp-npm.sh, which installs
# them on first use), the escape suite through kva-sandbox, the man page;
# everything but the cgroup limits (this host's cgroup v2 has no
# cpu/memory/pids controllers). Guest lane: the limits, on Debian 6.12.
check-sandbox: sandbox $(SANDBOX_FUZZ)
	@ASAN_OPTIONS=detect_leaks=1 $(SANDBOX_TEST) $(SANDBOX_PROBE)
	@$(MAKE) --no-print-directory check-sandbox-mcp
	@tests/sandbox/mcp-npm.sh
	@tests/sandbox/escape.sh host
	@mandoc -Tlint -W warning Documentation/man/kva-sandbox.1
	@! LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l Documentation/man/kva-sandbox.1 2>&1 \
		>/dev/null | grep .
	@echo "check-sandbox: man page lint clean"

# the cgroup lanes (kva-sandbox, then kvarenad), then the packaged systemd
# unit with systemd as PID 1: two guest boots
check-sandbox-guest: sandbox
	@tests/sandbox/run-guest.sh
	@tests/sandbox/systemd-guest.sh

bench-sandbox: $(SANDBOX_BENCH)
	@$(SANDBOX_BENCH)
