# sidecache — one Makefile builds the proxy, its unit tests and the bench driver.
#
#   make            build ./sidecache (-Wall -Wextra -Werror)
#   make test       unit + integration + interop tests, then the integration and interop tests on
#                   Redis 6.2 (installs test deps first)
#   make run        run the proxy in the foreground; starts a local redis-server
#                   on a free port when no upstream is given (UPSTREAM, or in ARGS)
#   make SANITIZE=1 ...   the same with ASan + UBSan (what CI runs)
#   make bench      the benchmark scripts in bench/ (not part of make test)

CC      ?= cc
BUILD   ?= build
# Go for the interop tests, where the machine's is older than tests/interop
# needs (scripts/install-deps.sh test fetches one there)
export PATH := $(CURDIR)/build-deps/go/bin:$(PATH)
CFLAGS_BASE := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter \
               -g -O2 -MMD -MP -I.
# CI builds and tests with ASan + UBSan.
ifeq ($(CI),true)
  SANITIZE ?= 1
endif
ifeq ($(SANITIZE),1)
  CFLAGS_BASE += -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
  LDFLAGS     += -fsanitize=address,undefined
  BUILD       := build-san
endif
CFLAGS  += $(CFLAGS_BASE)
# Built by GCC, the proxy links with link-time optimisation: calls across its
# modules (the parser, the command table, the cache) inline, which runs 9%
# fewer instructions per batch-unlink transaction (bench/instructions.sh).
# Fat objects: the unit tests link the same archive without it, as fast as
# before. Other compilers (clang's LTO needs its own archiver) and `make
# LTO=` build without it.
ifneq ($(SANITIZE),1)
  ifneq ($(shell $(CC) -v 2>&1 | grep -c '^gcc version'),0)
    LTO ?= -flto=auto -ffat-lto-objects
  endif
endif
LIBS    := -levent_openssl -levent -lssl -lcrypto -lm -pthread

PROTOCOL_SRC := $(wildcard protocol/*.c)
CACHE_SRC    := $(wildcard cache/*.c)
INV_SRC      := $(wildcard invalidation/*.c)
PROXY_SRC    := $(filter-out proxy/main.c,$(wildcard proxy/*.c))
LIB_SRC      := $(PROTOCOL_SRC) $(CACHE_SRC) $(INV_SRC) $(PROXY_SRC)
LIB_OBJ      := $(LIB_SRC:%.c=$(BUILD)/%.o)

UNIT_SRC     := $(wildcard tests/unit/test_*.c)
UNIT_BIN     := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)

BIN := $(BUILD)/sidecache

.PHONY: all test unit integration interop integration-redis62 run bench deps test-deps fuzz-deps clean fuzz
# ./sidecache is the plain build; a sanitizer build stays in build-san/.
all: $(BIN)
	@[ "$(SANITIZE)" = 1 ] || ln -sf $(BIN) sidecache

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LTO) -c $< -o $@

$(BUILD)/libsidecache.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BIN): $(BUILD)/proxy/main.o $(BUILD)/libsidecache.a
	$(CC) $(CFLAGS) $(LTO) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libsidecache.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libsidecache.a $(LIBS)

# Build dependencies (Debian packages); a no-op when they are present.
deps:
	@scripts/install-deps.sh build

test-deps:
	@scripts/install-deps.sh test

unit: deps $(UNIT_BIN)
	@scripts/run-unit.sh $(UNIT_BIN)

integration: test-deps $(BIN)
	SIDECACHE_BIN=$(CURDIR)/$(BIN) python3 -m pytest -q tests/integration

# go-redis programs (tests/interop), then JuiceFS's own metadata tests
# (tests/juicefs) through the proxy
interop: test-deps $(BIN)
	SIDECACHE_BIN=$(CURDIR)/$(BIN) scripts/run-interop.sh
	SIDECACHE_BIN=$(CURDIR)/$(BIN) scripts/run-juicefs-suite.sh

# The integration and interop tests again, with Redis 6.2 behind the proxy
# (built from source: install-deps.sh redis62); tests of what 6.2 lacks are
# skipped.
integration-redis62: test-deps $(BIN)
	@scripts/install-deps.sh redis62
	REDIS_SERVER_BIN=$(CURDIR)/build-deps/redis-6.2/redis-server SIDECACHE_BIN=$(CURDIR)/$(BIN) \
		python3 -m pytest -q tests/integration
	REDIS_SERVER=$(CURDIR)/build-deps/redis-6.2/redis-server SIDECACHE_BIN=$(CURDIR)/$(BIN) \
		scripts/run-interop.sh
	REDIS_SERVER=$(CURDIR)/build-deps/redis-6.2/redis-server SIDECACHE_BIN=$(CURDIR)/$(BIN) \
		scripts/run-juicefs-suite.sh

test: deps test-deps
	$(MAKE) unit
	$(MAKE) integration
	$(MAKE) interop
	$(MAKE) integration-redis62

run: deps all
	@scripts/run.sh $(CURDIR)/$(BIN)

bench/build/loadgen: bench/loadgen.c bench/rng.h
	@mkdir -p $(dir $@)
	$(CC) -O2 -Wall -Wextra -o $@ $< -lhiredis -levent -lm

bench: deps test-deps $(BIN) bench/build/loadgen
	@scripts/install-deps.sh bench
	@bench/run.sh

# libFuzzer targets (tests/fuzz/), FUZZ_SECONDS each; needs clang (fuzz-deps),
# and fuzz_session, which links the whole proxy, the build deps too.
fuzz-deps:
	@scripts/install-deps.sh fuzz

fuzz: deps fuzz-deps
	@scripts/fuzz.sh

clean:
	rm -rf build build-san build-fuzz build-deps sidecache

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
