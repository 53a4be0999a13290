# Builds ngx_http_profiling_module.so against the nginx tree found by
# ./configure, and runs the tests. BUILD selects the build directory.

BUILD ?= build

ifeq ($(wildcard $(BUILD)/config.mk),)
$(error $(BUILD)/config.mk is missing: run ./configure first)
endif

include $(BUILD)/config.mk

MODULE = $(BUILD)/ngx_http_profiling_module.so
TEST_MODULES = $(BUILD)/test/ngx_http_profiling_module.so \
               $(BUILD)/test/ngx_http_profiling_burn_module.so

SHARED_SRCS = $(wildcard $(TOP)/shared/*.c)
SHARED_HDRS = $(wildcard $(TOP)/shared/*.h)
GEN = $(BUILD)/gen/profile.pb.c $(BUILD)/gen/profile.pb.h

UNIT_CFLAGS = -std=gnu99 -g -O1 -W -Wall -Wextra -Wno-unused-parameter \
              -Werror -fPIE -pie -Wl,--build-id -I$(TOP)/shared \
              -I$(BUILD)/gen $(EXTRA_CFLAGS)
UNIT_LIBS = $(PROFILING_LIBS) -lcmocka -ldl -lpthread
UNIT_TESTS = $(patsubst $(TOP)/t/unit/%.c,$(BUILD)/unit/%, \
               $(wildcard $(TOP)/t/unit/test_*.c))

.PHONY: all module test-modules unit integration test clean

all: module

$(GEN): $(TOP)/shared/profile.proto
	mkdir -p $(BUILD)/gen
	cd $(TOP)/shared && nanopb_generator.py -q -D $(BUILD)/gen profile.proto

$(BUILD)/nginx/objs/Makefile: $(TOP)/module/config $(BUILD)/config.mk
	$(BUILD)/configure-nginx.sh $(BUILD)/nginx $(TOP)/module

$(BUILD)/nginx-test/objs/Makefile: $(TOP)/module/config \
        $(TOP)/t/burn/config $(BUILD)/config.mk
	$(BUILD)/configure-nginx.sh $(BUILD)/nginx-test $(TOP)/module \
	    $(TOP)/t/burn

module: $(GEN) $(BUILD)/nginx/objs/Makefile
	$(MAKE) -C $(BUILD)/nginx -f objs/Makefile modules
	cp $(BUILD)/nginx/objs/ngx_http_profiling_module.so $(MODULE)
	@echo "built $(MODULE)"

test-modules: $(GEN) $(BUILD)/nginx-test/objs/Makefile
	$(MAKE) -C $(BUILD)/nginx-test -f objs/Makefile modules
	mkdir -p $(BUILD)/test
	cp $(BUILD)/nginx-test/objs/*.so $(BUILD)/test/

$(BUILD)/unit/%: $(TOP)/t/unit/%.c $(SHARED_SRCS) $(SHARED_HDRS) $(GEN)
	mkdir -p $(BUILD)/unit
	$(CC) $(UNIT_CFLAGS) -o $@ $< $(SHARED_SRCS) $(BUILD)/gen/profile.pb.c \
	    $(UNIT_LIBS) $(EXTRA_LDFLAGS)

unit: $(UNIT_TESTS)
	@set -e; for t in $(UNIT_TESTS); do echo "== $$t"; \
	    PROTO=$(TOP)/shared/profile.proto $$t; done

integration: module test-modules
	PROFILING_BUILD=$(BUILD) prove -v $(TOP)/t/

test: unit integration

clean:
	rm -rf $(BUILD)/nginx $(BUILD)/nginx-test $(BUILD)/gen $(BUILD)/unit \
	    $(BUILD)/test $(MODULE)
