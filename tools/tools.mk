# Tools: kva-share (the demo's two-process sharing walk-through).
TOOLS_BINS := $(B)/bin/kva-share

$(B)/bin/%: tools/%.c $(LIB_A) lib/kvarena.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(CFLAGS) $< -o $@ $(LIB_A) $(LIB_LDLIBS)

.PHONY: tools
tools: $(TOOLS_BINS)
