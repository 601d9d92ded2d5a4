# SPDX-License-Identifier: GPL-2.0
# Host unit tests for the shared core (kmod/core/*.c) under ASan + UBSan.
#
# Included from the top-level Makefile, or used alone from the repo root:
#   make -f tests/core/core.mk check-core
# All paths are relative to the repository root.  Variables are CORE_* only.

CORE_DIRECT := $(if $(filter 1,$(words $(MAKEFILE_LIST))),1,)
CORE_SAVED_GOAL := $(.DEFAULT_GOAL)

CORE_CC ?= gcc
CORE_SAN := -fsanitize=address,undefined -fno-omit-frame-pointer \
	-fno-sanitize-recover=all
CORE_CFLAGS := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -g -O1 \
	$(CORE_SAN) -Iinclude/uapi -Ikmod/core -Itests/core
# --wrap=calloc: the tests make the core's allocations fail on demand.
CORE_LDFLAGS := $(CORE_SAN) -Wl,--wrap=calloc
CORE_LDLIBS := -lcunit
CORE_RUN_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

CORE_BUILD := build/tests/core
CORE_BIN := $(CORE_BUILD)/test_core
CORE_LIB_SRCS := $(sort $(wildcard kmod/core/*.c))
CORE_TEST_SRCS := $(sort $(wildcard tests/core/*.c))
CORE_OBJS := $(patsubst %.c,$(CORE_BUILD)/%.o,$(CORE_LIB_SRCS) $(CORE_TEST_SRCS))

.PHONY: check-core

check-core: $(CORE_BIN)
	$(CORE_RUN_ENV) ./$(CORE_BIN)

$(CORE_BIN): $(CORE_OBJS)
	$(CORE_CC) $(CORE_LDFLAGS) -o $@ $(CORE_OBJS) $(CORE_LDLIBS)

$(CORE_BUILD)/%.o: %.c tests/core/core.mk
	@mkdir -p $(@D)
	$(CORE_CC) $(CORE_CFLAGS) -MMD -MP -c -o $@ $<

-include $(CORE_OBJS:.o=.d)

# When included, do not take over the including Makefile's default goal.
ifeq ($(CORE_DIRECT),)
.DEFAULT_GOAL := $(CORE_SAVED_GOAL)
endif
