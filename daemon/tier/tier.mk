# SPDX-License-Identifier: MIT
# tier.mk - KV tiers below the arena (daemon/tier/): the disk tier over
# io_uring and the keep/spill/discard economics, as a static library
# kvarenad links, and its unit tests. Included from the top-level Makefile
# before kvarenad.mk; paths are relative to the repository root.
#
#   TIER_LIB / TIER_SLIB   the library (plain / ASan+UBSan); link $(TIER_LIBS)
#   check-tier             unit tests on real files and a real io_uring
#   bench-tier             BENCH=tier (tools/bench/tier/)

TIER_SRC    := daemon/tier
TIER_OUT    := build/tier
TIER_CFLAGS := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -O2 -g -I$(TIER_SRC)
TIER_SAN    := -O1 -fsanitize=address,undefined -fno-omit-frame-pointer \
               -fno-sanitize-recover=all
TIER_LIBS   := -luring -lxxhash -lpthread
TIER_NAMES  := tier spillfile cost
TIER_HDRS   := $(wildcard $(TIER_SRC)/*.h)
TIER_OBJS   := $(TIER_NAMES:%=$(TIER_OUT)/obj/%.o)
TIER_SOBJS  := $(TIER_NAMES:%=$(TIER_OUT)/san/%.o)
TIER_LIB    := $(TIER_OUT)/libkvtier.a
TIER_SLIB   := $(TIER_OUT)/libkvtier-san.a
TIER_TEST   := $(TIER_OUT)/tests/test_tier
TIER_BENCH  := $(TIER_OUT)/kvt-bench

.PHONY: tier check-tier
tier: $(TIER_LIB) $(TIER_SLIB)

$(TIER_OBJS): $(TIER_OUT)/obj/%.o: $(TIER_SRC)/%.c $(TIER_HDRS)
	@mkdir -p $(@D)
	$(CC) $(TIER_CFLAGS) -c $< -o $@

$(TIER_SOBJS): $(TIER_OUT)/san/%.o: $(TIER_SRC)/%.c $(TIER_HDRS)
	@mkdir -p $(@D)
	$(CC) $(TIER_CFLAGS) $(TIER_SAN) -c $< -o $@

$(TIER_LIB): $(TIER_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(TIER_SLIB): $(TIER_SOBJS)
	@rm -f $@
	ar rcs $@ $^

# The arena is a real libkvarena arena (memfd backend on the host). The
# tests build the tier's sources with its test hook (kvt_test_hold: an
# operation held in flight by construction), which the library never has.
TIER_CSRC   := $(TIER_NAMES:%=$(TIER_SRC)/%.c)
$(TIER_TEST): tests/tier/test_tier.c $(TIER_CSRC) $(LIB_A) $(TIER_HDRS)
	@mkdir -p $(@D)
	$(CC) $(TIER_CFLAGS) $(TIER_SAN) -DKVT_TEST_HOOKS -Ilib -Iinclude/uapi $< $(TIER_CSRC) \
		$(LIB_A) -o $@ -lcunit $(TIER_LIBS) $(LIB_LDLIBS)

# The spill directory is on build/'s file system (O_DIRECT where it can).
check-tier: $(TIER_TEST)
	ASAN_OPTIONS=detect_leaks=1 $(TIER_TEST) $(TIER_OUT)/tests

# Unsanitized, for the guests (tests/daemon/run-guest-tier.sh).
TIER_TEST_G := $(TIER_OUT)/tests/test_tier_guest
$(TIER_TEST_G): tests/tier/test_tier.c $(TIER_CSRC) $(LIB_A) $(TIER_HDRS)
	@mkdir -p $(@D)
	$(CC) $(TIER_CFLAGS) -DKVT_TEST_HOOKS -Ilib -Iinclude/uapi $< $(TIER_CSRC) $(LIB_A) -o $@ \
		-lcunit $(TIER_LIBS) $(LIB_LDLIBS)

# BENCH=tier: an 8k-token session through the tier against fio, and
# restoring it against recomputing it (tools/bench/run-bench.sh)
$(TIER_BENCH): tools/bench/tier/kvt-bench.c $(TIER_LIB) $(ENGINE_LIB) $(LIB_A) $(TIER_HDRS)
	@mkdir -p $(@D)
	$(CC) $(TIER_CFLAGS) -Idaemon/engine -Ilib -Iinclude/uapi $< $(TIER_LIB) $(ENGINE_LIB) \
		$(LIB_A) -o $@ $(TIER_LIBS) $(ENGINE_LIBS) $(LIB_LDLIBS)
