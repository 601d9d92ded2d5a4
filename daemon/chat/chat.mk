# SPDX-License-Identifier: MIT
# chat.mk - model families (daemon/chat/): chat templates and tool-call
# syntaxes, shared by the API front ends and the orchestrator, and their
# tests. Included from the top-level Makefile (-include) before api.mk and
# kvarenad.mk; paths from the repo root.
#
#   CHAT_LIB / CHAT_SLIB   the room as a static library (plain / ASan+UBSan),
#                          with daemon/common/strbuf.c; link -ljansson
#   check-chat             its unit tests

CHAT_CC     ?= cc
CHAT_SRC    := daemon/chat
CHAT_OUT    := build/chat
CHAT_CFLAGS := -std=c11 -Wall -Wextra -Werror -O2 -g -I$(CHAT_SRC) -Idaemon/common
CHAT_SAN    := -O1 -fsanitize=address,undefined -fno-omit-frame-pointer \
               -fno-sanitize-recover=all
CHAT_SRCS   := $(sort $(wildcard $(CHAT_SRC)/*.c)) daemon/common/strbuf.c
CHAT_HDRS   := $(wildcard $(CHAT_SRC)/*.h) daemon/common/strbuf.h
CHAT_OBJS   := $(CHAT_SRCS:%.c=$(CHAT_OUT)/obj/%.o)
CHAT_SOBJS  := $(CHAT_SRCS:%.c=$(CHAT_OUT)/san/%.o)
CHAT_LIB    := $(CHAT_OUT)/libkvdchat.a
CHAT_SLIB   := $(CHAT_OUT)/libkvdchat-san.a
CHAT_UNIT   := $(CHAT_OUT)/tests/test_chat

.PHONY: chat check-chat
chat: $(CHAT_LIB) $(CHAT_SLIB) $(CHAT_UNIT)

$(CHAT_OBJS): $(CHAT_OUT)/obj/%.o: %.c $(CHAT_HDRS)
	@mkdir -p $(@D)
	$(CHAT_CC) $(CHAT_CFLAGS) -c $< -o $@

$(CHAT_SOBJS): $(CHAT_OUT)/san/%.o: %.c $(CHAT_HDRS)
	@mkdir -p $(@D)
	$(CHAT_CC) $(CHAT_CFLAGS) $(CHAT_SAN) -c $< -o $@

$(CHAT_LIB): $(CHAT_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(CHAT_SLIB): $(CHAT_SOBJS)
	@rm -f $@
	ar rcs $@ $^

$(CHAT_UNIT): tests/chat/test_chat.c $(CHAT_SLIB) $(CHAT_HDRS)
	@mkdir -p $(@D)
	$(CHAT_CC) $(CHAT_CFLAGS) $(CHAT_SAN) $< $(CHAT_SLIB) -o $@ -lcunit -ljansson

check-chat: $(CHAT_UNIT)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ./$(CHAT_UNIT)
