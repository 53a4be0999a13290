# SPDX-License-Identifier: BSD-2-Clause
# Builds ngx_http_profiling_module.so against the nginx tree found by
# ./configure, and runs the tests. BUILD selects the build directory.

BUILD ?= build

# 'make deb' needs no ./configure (debian/rules configures its own build).
ifneq ($(if $(MAKECMDGOALS),$(filter-out deb,$(MAKECMDGOALS)),all),)
ifeq ($(wildcard $(BUILD)/config.mk),)
$(error $(BUILD)/config.mk is missing: run ./configure first)
endif

include $(BUILD)/config.mk
endif

MODULE = $(BUILD_DIR)/ngx_http_profiling_module.so
TEST_MODULES = $(BUILD_DIR)/test/ngx_http_profiling_module.so \
               $(BUILD_DIR)/test/ngx_http_profiling_burn_module.so
H3CLIENT = $(BUILD_DIR)/test/h3client
QUIC_GO = /usr/share/gocode/src/github.com/lucas-clemente/quic-go

SHARED_SRCS = $(wildcard $(TOP)/shared/*/*.c)
SHARED_HDRS = $(wildcard $(TOP)/shared/*/*.h $(TOP)/shared/*/*/*.h)
GEN = $(BUILD_DIR)/gen/profile.pb.c $(BUILD_DIR)/gen/profile.pb.h
# The profiling_ui page's files, embedded in the module.
UI_FILES = $(TOP)/module/ui/ui.html $(TOP)/module/ui/ui.js \
           $(TOP)/module/ui/ui.css
UI_ASSETS = $(BUILD_DIR)/gen/ngx_http_profiling_ui_assets.c

UNIT_CFLAGS = -std=gnu99 -g -O1 -W -Wall -Wextra -Wno-unused-parameter \
              -Werror -fPIE -pie -Wl,--build-id -I$(TOP)/shared \
              -I$(BUILD_DIR)/gen $(EXTRA_CFLAGS) \
              -DTEST_CC='"$(CC)"' -DTEST_TOOLS='"$(TOOLS)"'
UNIT_LIBS = $(PROFILING_LIBS) -lcmocka -ldl -lpthread
UNIT_TESTS = $(patsubst $(TOP)/t/unit/%.c,$(BUILD_DIR)/unit/%, \
               $(wildcard $(TOP)/t/unit/test_*.c))
# shared/ compiled once for all the unit tests (not once each).
UNIT_OBJS = $(patsubst $(TOP)/shared/%.c,$(BUILD_DIR)/unit/obj/%.o, \
               $(SHARED_SRCS)) $(BUILD_DIR)/unit/obj/profile.pb.o

.PHONY: all module test-modules unit integration fuzz bench-cold test clean

all: module

$(GEN) &: $(TOP)/shared/profiler/profile.proto
	mkdir -p $(BUILD_DIR)/gen
	cd $(TOP)/shared/profiler && nanopb_generator.py -q -D $(BUILD_DIR)/gen profile.proto

$(UI_ASSETS): $(TOP)/module/ui/embed $(UI_FILES)
	mkdir -p $(BUILD_DIR)/gen
	$(TOP)/module/ui/embed $@ $(UI_FILES)

# nginx's build lists the files module/config found when it ran: run it
# again when a file of shared/ comes or goes (this list changes then).
SHARED_LIST = $(BUILD_DIR)/shared-files
$(SHARED_LIST): FORCE
	@mkdir -p $(BUILD_DIR)
	@echo '$(SHARED_SRCS) $(SHARED_HDRS)' | cmp -s - $@ \
	    || echo '$(SHARED_SRCS) $(SHARED_HDRS)' > $@

.PHONY: FORCE
FORCE:

$(BUILD_DIR)/nginx/objs/Makefile: $(TOP)/module/config $(BUILD_DIR)/config.mk \
        $(SHARED_LIST)
	$(BUILD_DIR)/configure-nginx.sh $(BUILD_DIR)/nginx $(TOP)/module

$(BUILD_DIR)/nginx-test/objs/Makefile: $(TOP)/module/config \
        $(TOP)/t/burn/config $(BUILD_DIR)/config.mk $(SHARED_LIST)
	$(BUILD_DIR)/configure-nginx.sh $(BUILD_DIR)/nginx-test $(TOP)/module \
	    $(TOP)/t/burn

module: $(GEN) $(UI_ASSETS) $(BUILD_DIR)/nginx/objs/Makefile
	$(MAKE) -C $(BUILD_DIR)/nginx -f objs/Makefile modules
	cp $(BUILD_DIR)/nginx/objs/ngx_http_profiling_module.so $(MODULE).tmp
	mv -f $(MODULE).tmp $(MODULE)
	@echo "built $(MODULE)"

test-modules: $(GEN) $(UI_ASSETS) $(BUILD_DIR)/nginx-test/objs/Makefile $(H3CLIENT)
	$(MAKE) -C $(BUILD_DIR)/nginx-test -f objs/Makefile modules
	mkdir -p $(BUILD_DIR)/test
	for so in $(BUILD_DIR)/nginx-test/objs/*.so; do \
	    cp $$so $(BUILD_DIR)/test/.tmp.so && \
	    mv -f $(BUILD_DIR)/test/.tmp.so $(BUILD_DIR)/test/$${so##*/}; \
	done

# The HTTP/3 client of t/hotspots-h3.t (Go, with Debian's quic-go),
# where those are installed; else the test skips.
$(H3CLIENT): $(TOP)/t/h3client/main.go
	@if command -v go >/dev/null 2>&1 && [ -d $(QUIC_GO) ]; then \
	    mkdir -p $(BUILD_DIR)/test $(BUILD_DIR)/go-cache && \
	    cd $(TOP)/t/h3client && GOPATH=/usr/share/gocode GO111MODULE=off \
	    GOCACHE=$(BUILD_DIR)/go-cache go build -o $@ . ; \
	else \
	    echo "note: no go or quic-go (golang-github-lucas-clemente-quic-go-dev): t/hotspots-h3.t will skip"; \
	fi

$(BUILD_DIR)/unit/obj/%.o: $(TOP)/shared/%.c $(SHARED_HDRS) $(GEN) \
        $(BUILD_DIR)/config.mk
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -pie -Wl%,$(UNIT_CFLAGS)) -c -o $@ $<

$(BUILD_DIR)/unit/obj/profile.pb.o: $(GEN) $(BUILD_DIR)/config.mk
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -pie -Wl%,$(UNIT_CFLAGS)) -c -o $@ $(BUILD_DIR)/gen/profile.pb.c

$(BUILD_DIR)/unit/%: $(TOP)/t/unit/%.c $(TOP)/t/unit/unit.h $(UNIT_OBJS)
	mkdir -p $(BUILD_DIR)/unit
	$(CC) $(UNIT_CFLAGS) -o $@ $< $(UNIT_OBJS) $(UNIT_LIBS) $(EXTRA_LDFLAGS)

# A shared object without unwind tables (assembly without CFI), as musl's
# libc is, that the unwind tests load.
$(BUILD_DIR)/unit/libnocfi.so: $(TOP)/t/unit/nocfi.S
	mkdir -p $(BUILD_DIR)/unit
	$(CC) -shared -nostdlib -Wl,--build-id -o $@ $<

$(BUILD_DIR)/unit/test_unwind: $(BUILD_DIR)/unit/libnocfi.so
$(BUILD_DIR)/unit/test_unwind: EXTRA_LDFLAGS += -L$(BUILD_DIR)/unit -lnocfi \
    -Wl,-rpath,$(BUILD_DIR)/unit

unit: $(UNIT_TESTS)
	@set -e; for t in $(UNIT_TESTS); do echo "== $$t"; \
	    PROTO=$(TOP)/shared/profiler/profile.proto $$t; done

# The files one at a time, but t/hostile-dumpdir.t, which waits past a
# minute with its nginx idle, beside them (its output after theirs). They
# start with the configuration's tests, which measure no time, while it
# starts its instances and drives load at them for some seconds.
INTEGRATION_BESIDE = $(TOP)/t/hostile-dumpdir.t
INTEGRATION_FIRST = $(TOP)/t/config.t $(TOP)/t/configure.t
INTEGRATION_REST = $(filter-out $(INTEGRATION_BESIDE) $(INTEGRATION_FIRST), \
                       $(sort $(wildcard $(TOP)/t/*.t)))

integration: module test-modules
	@export PROFILING_BUILD=$(BUILD_DIR); \
	prove -v --timer $(INTEGRATION_BESIDE) >$(BUILD_DIR)/beside.log 2>&1 & \
	beside=$$!; \
	prove -v --timer $(INTEGRATION_FIRST) $(INTEGRATION_REST); rc=$$?; \
	wait $$beside; rc_beside=$$?; \
	cat $(BUILD_DIR)/beside.log; \
	[ $$rc -eq 0 ] && [ $$rc_beside -eq 0 ]

# libFuzzer (clang) on the trace context parsers for FUZZ_SECONDS, and on
# the symbolizer's ELF parsing for FUZZ_ELF_SECONDS (seeds made from the
# system's own libraries by t/fuzz/elf-seeds.sh).
FUZZ_SECONDS ?= 30
FUZZ_ELF_SECONDS ?= $(FUZZ_SECONDS)
FUZZER = $(BUILD_DIR)/fuzz/fuzz_trace_context
FUZZER_ELF = $(BUILD_DIR)/fuzz/fuzz_elf

# The unwind tables' .eh_frame_hdr/.eh_frame parsing and the walk over them
# for FUZZ_UNWIND_SECONDS (seeds: images of the system's own libraries,
# made by t/fuzz/unwind-seeds.py).
FUZZ_UNWIND_SECONDS ?= $(FUZZ_SECONDS)
FUZZER_UNWIND = $(BUILD_DIR)/fuzz/fuzz_unwind

$(FUZZER): $(TOP)/t/fuzz/fuzz_trace_context.c $(TOP)/shared/worker/trace_context.c \
        $(TOP)/shared/worker/trace_context.h
	mkdir -p $(BUILD_DIR)/fuzz/corpus
	clang -g -O1 -fsanitize=fuzzer,address,undefined \
	    -fno-sanitize-recover=all -I$(TOP)/shared -o $@ $< \
	    $(TOP)/shared/worker/trace_context.c

FUZZ_ELF_SRCS = $(TOP)/shared/profiler/symbolizer.c \
                $(TOP)/shared/profiler/proc_maps.c \
                $(TOP)/shared/profiler/object_cache.c \
                $(TOP)/shared/profiler/object_symbols.c \
                $(TOP)/shared/profiler/symbol_table.c \
                $(TOP)/shared/profiler/symbol_store.c \
                $(TOP)/shared/profiler/dwarf_inlines.c \
                $(TOP)/shared/profiler/inline_table.c \
                $(TOP)/shared/profiler/debuginfod_symbols.c \
                $(TOP)/shared/profiler/elf_file.c \
                $(TOP)/shared/profiler/debug_info.c \
                $(TOP)/shared/profiler/debuginfod.c \
                $(TOP)/shared/profiler/thread.c $(TOP)/shared/common/io.c

# (inline_table.h is the builder's header too)
FUZZ_ELF_BUILD = $(TOP)/shared/profiler/inline_table_build.c \
                 $(TOP)/shared/profiler/inline_table_image.h \
                 $(TOP)/shared/common/intern.c $(TOP)/shared/common/intern.h

$(FUZZER_ELF): $(TOP)/t/fuzz/fuzz_elf.c $(FUZZ_ELF_SRCS) \
        $(FUZZ_ELF_SRCS:.c=.h) $(FUZZ_ELF_BUILD) \
        $(TOP)/shared/profiler/symbolizer_internal.h
	mkdir -p $(BUILD_DIR)/fuzz/elf-corpus
	clang -g -O1 -fsanitize=fuzzer,address,undefined \
	    -fno-sanitize-recover=all -I$(TOP)/shared -o $@ $< \
	    $(FUZZ_ELF_SRCS) $(filter %.c,$(FUZZ_ELF_BUILD)) \
	    -llzma -lz -ldw -lelf -luv -ldl

FUZZ_UNWIND_SRCS = $(TOP)/shared/worker/unwind.c \
                   $(TOP)/shared/worker/unwind_build.c \
                   $(TOP)/shared/worker/eh_frame.c \
                   $(TOP)/shared/common/unwind_walk.c

$(FUZZER_UNWIND): $(TOP)/t/fuzz/fuzz_unwind.c $(FUZZ_UNWIND_SRCS) \
        $(TOP)/shared/worker/unwind.h $(TOP)/shared/common/unwind_walk.h \
        $(TOP)/shared/common/unwind_table.h \
        $(TOP)/shared/worker/unwind_build.h $(TOP)/shared/worker/eh_frame.h \
        $(TOP)/shared/worker/arch.h $(wildcard $(TOP)/shared/worker/arch/*.h) \
        $(TOP)/shared/common/arch.h $(wildcard $(TOP)/shared/common/arch/*.h)
	mkdir -p $(BUILD_DIR)/fuzz/unwind-corpus
	clang -g -O1 -fsanitize=fuzzer,address,undefined \
	    -fno-sanitize-recover=all -I$(TOP)/shared -o $@ $< \
	    $(FUZZ_UNWIND_SRCS)

fuzz: $(FUZZER) $(FUZZER_ELF) $(FUZZER_UNWIND)
	$(FUZZER) -max_total_time=$(FUZZ_SECONDS) -max_len=256 \
	    $(BUILD_DIR)/fuzz/corpus $(TOP)/t/fuzz/seeds
	rm -rf $(BUILD_DIR)/fuzz/elf-seeds
	CC=clang $(TOP)/t/fuzz/elf-seeds.sh $(BUILD_DIR)/fuzz/elf-seeds
	$(FUZZER_ELF) -max_total_time=$(FUZZ_ELF_SECONDS) -max_len=65536 \
	    $(BUILD_DIR)/fuzz/elf-corpus $(BUILD_DIR)/fuzz/elf-seeds
	rm -rf $(BUILD_DIR)/fuzz/unwind-seeds
	CC=clang $(TOP)/t/fuzz/unwind-seeds.py $(BUILD_DIR)/fuzz/unwind-seeds
	$(FUZZER_UNWIND) -max_total_time=$(FUZZ_UNWIND_SECONDS) \
	    -max_len=262144 -rss_limit_mb=4096 \
	    -artifact_prefix=$(BUILD_DIR)/fuzz/unwind- \
	    $(BUILD_DIR)/fuzz/unwind-corpus $(BUILD_DIR)/fuzz/unwind-seeds

# Cold-path benchmark of the profiler loop thread (aggregation, pprof
# encoding), optimised as the packaged nginx is: build only, run it by hand.
$(BUILD_DIR)/bench/coldpath: $(TOP)/t/bench/coldpath.c $(SHARED_SRCS) \
        $(SHARED_HDRS) $(GEN)
	mkdir -p $(BUILD_DIR)/bench
	$(CC) $(patsubst -O1,-O2,$(UNIT_CFLAGS)) -o $@ $< $(SHARED_SRCS) \
	    $(BUILD_DIR)/gen/profile.pb.c $(filter-out -lcmocka,$(UNIT_LIBS)) \
	    $(EXTRA_LDFLAGS)

bench-cold: $(BUILD_DIR)/bench/coldpath

# The request path's instructions under callgrind against the budget
# (ci/bench-instructions --check), and the signal path's external symbols
# against the async-signal-safe list (ci/check-signal-path).
.PHONY: bench-instructions check-signal-path
bench-instructions: module
	$(TOP)/ci/bench-instructions --check --module $(MODULE)

check-signal-path: module
	$(TOP)/ci/check-signal-path $(BUILD_DIR)

test: unit integration fuzz

# The Debian package libnginx-mod-http-profiling (debian/): dpkg-buildpackage
# writes the .deb (and .buildinfo, .changes) into the parent directory.
.PHONY: deb
deb:
	cd $(dir $(abspath $(firstword $(MAKEFILE_LIST)))) && \
	    dpkg-buildpackage -b -us -uc

clean:
	rm -rf $(BUILD_DIR)/nginx $(BUILD_DIR)/nginx-test $(BUILD_DIR)/gen $(BUILD_DIR)/unit \
	    $(BUILD_DIR)/test $(MODULE)
