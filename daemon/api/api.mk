# SPDX-License-Identifier: MIT
# api.mk - kvarenad's HTTP / OpenAI API layer (daemon/api/) and its tests.
# Included from the top-level Makefile (-include); paths from the repo root.
#
#   API_LIB / API_SLIB   the layer as a static library (plain / ASan+UBSan);
#                        link with $(CHAT_LIB), $(API_LIBS) and daemon/common/log.c
#   check-api            unit tests, the bad-input suite and the official
#                        openai npm client against the test server
#
# The HTTP suites take the server from the environment so they can run
# against the real daemon (see tests/daemon/run-api.sh).

API_CC      ?= cc
API_SRC     := daemon/api
API_OUT     := build/api
API_CFLAGS  := -std=c11 -Wall -Wextra -Werror -O2 -g -I$(API_SRC) \
               -Idaemon/kvarenad -Idaemon/common -Idaemon/chat
API_SAN     := -O1 -fsanitize=address,undefined -fno-omit-frame-pointer \
               -fno-sanitize-recover=all
API_LIBS    := -lmicrohttpd -ljansson -lpthread
API_NAMES   := api auth chat_api chat_request completions error gen messages park response \
               responses responses_store tokenize turn_cache
API_HDRS    := $(wildcard $(API_SRC)/*.h) daemon/kvarenad/kvd.h daemon/common/log.h \
               $(CHAT_HDRS)
API_OBJS    := $(API_NAMES:%=$(API_OUT)/obj/%.o)
API_SOBJS   := $(API_NAMES:%=$(API_OUT)/san/%.o)
API_LIB     := $(API_OUT)/libkvdapi.a
API_SLIB    := $(API_OUT)/libkvdapi-san.a
API_UNIT    := $(API_OUT)/tests/test_api
API_SERVER  := $(API_OUT)/tests/kvd-api-testserver

.PHONY: api check-api check-api-unit deps-api
api: $(API_LIB) $(API_SLIB) $(API_UNIT) $(API_SERVER)

$(API_OBJS): $(API_OUT)/obj/%.o: $(API_SRC)/%.c $(API_HDRS)
	@mkdir -p $(@D)
	$(API_CC) $(API_CFLAGS) -c $< -o $@

$(API_SOBJS): $(API_OUT)/san/%.o: $(API_SRC)/%.c $(API_HDRS)
	@mkdir -p $(@D)
	$(API_CC) $(API_CFLAGS) $(API_SAN) -c $< -o $@

$(API_LIB): $(API_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(API_SLIB): $(API_SOBJS)
	@rm -f $@
	ar rcs $@ $^

# test_api fails the request parser's allocations one by one (calloc,
# wrapped: tests/daemon/test_api.c)
$(API_UNIT): tests/daemon/test_api.c $(API_SLIB) $(CHAT_SLIB) $(API_HDRS)
	@mkdir -p $(@D)
	$(API_CC) $(API_CFLAGS) $(API_SAN) $< $(API_SLIB) $(CHAT_SLIB) daemon/common/log.c -o $@ \
		-Wl,--wrap=calloc -lcunit $(API_LIBS)

$(API_SERVER): tests/daemon/api_testserver.c tests/daemon/scripted_kvd.c \
		tests/daemon/scripted_kvd.h $(API_SLIB) $(CHAT_SLIB) $(API_HDRS)
	@mkdir -p $(@D)
	$(API_CC) $(API_CFLAGS) $(API_SAN) -Itests/daemon tests/daemon/api_testserver.c \
		tests/daemon/scripted_kvd.c daemon/common/log.c $(API_SLIB) $(CHAT_SLIB) -o $@ $(API_LIBS)

check-api-unit: $(API_UNIT)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ./$(API_UNIT)

check-api: deps-api $(API_UNIT) $(API_SERVER)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ./$(API_UNIT)
	KVD_API_SERVER=$(API_SERVER) sh tests/daemon/run-api.sh
	python3 tests/daemon/api_server_tools.py $(API_SERVER) 2>/dev/null
	python3 tests/daemon/api_frontends.py $(API_SERVER) 2>/dev/null
	KVD_API_FUZZ_ARGS=--server-tools python3 tests/daemon/api_fuzz.py $(API_SERVER) 20

deps-api:
	@[ -f /usr/include/microhttpd.h ] && [ -f /usr/include/jansson.h ] && \
		command -v node >/dev/null && command -v npm >/dev/null || \
		scripts/deps.sh build
