# Thin wrapper over CMake. `make up` and `make test` do all set-up themselves.
BUILD      ?= build
BUILD_ASAN ?= build-asan
JOBS       ?= $(shell nproc)
DATA_DIR   ?= /var/lib/airlock
CTEST_ARGS ?=

.PHONY: all deps npm-deps build build-asan vm-kernel up cluster test test-unit test-e2e test-vm bench clean fuzz install deb

all: build

deps:
	@sh scripts/setup-deps.sh

# The s3 tests' npm packages (s3rver, the AWS client), as the lockfile pins them;
# the TypeScript SDK's dev tooling (typescript), and its build (sdk/typescript/dist);
# the web console's (xterm.js, playwright-core).
npm-deps: deps
	@sh tests/s3/setup.sh
	@sh sdk/typescript/setup.sh
	@sh tests/e2b/setup.sh
	@sh scripts/console-setup.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

# The vm backend's guest kernel and initramfs in $(BUILD)/vm (also part of
# `build`; cached: only the first run downloads the kernel package).
vm-kernel: build
	@cmake --build $(BUILD) --target vm-kernel

# Unit and fuzz-replay tests under AddressSanitizer + UBSan.
build-asan: deps
	@cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DAIRLOCK_SANITIZE=ON >/dev/null
	@cmake --build $(BUILD_ASAN) -j$(JOBS)

# Install under PREFIX (FHS: bin/, lib/airlock/, the systemd unit; the config
# in /etc/airlock). DESTDIR stages it elsewhere.
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

# A Debian package of the same layout under /usr: $(BUILD)/airlock_*.deb.
deb: build
	cd $(BUILD) && cpack

# Build, prepare the pool and the default templates, run the all-in-one server.
# TEMPLATES=busybox,debian,code-interpreter,desktop also builds the on-demand
# built-ins at start (each is otherwise built by its first create).
TEMPLATES  ?=
up: build
	@ln -sf $(CURDIR)/$(BUILD)/bin/airlock /usr/local/bin/airlock
	@ln -sf $(CURDIR)/$(BUILD)/bin/airlockd /usr/local/bin/airlockd
	$(BUILD)/bin/airlockd up --data-dir $(DATA_DIR)$(if $(TEMPLATES), --templates $(TEMPLATES))

# A two-node cluster on this machine (PostgreSQL 15, an S3-compatible server,
# two nodes) in a temporary directory; Ctrl-C stops and removes all of it.
cluster: build npm-deps
	python3 scripts/cluster.py --bin $(BUILD)/bin

# Every test: unit + fuzz replay + end-to-end on the release build, then unit +
# fuzz replay again under ASan/UBSan.
test: build build-asan npm-deps
	cd $(BUILD) && ctest --output-on-failure $(CTEST_ARGS)
	cd $(BUILD_ASAN) && ctest --output-on-failure -L 'unit|fuzz' $(CTEST_ARGS)
	cd $(BUILD_ASAN) && ctest --output-on-failure -R '^e2e-test_(core|cluster|suspend|pagination|api_limits)$$' $(CTEST_ARGS)

test-unit: build npm-deps
	cd $(BUILD) && ctest --output-on-failure -L 'unit|fuzz' $(CTEST_ARGS)

test-e2e: build
	cd $(BUILD) && ctest --output-on-failure -L e2e $(CTEST_ARGS)

# Boots the guest kernel under QEMU (TCG here): label vm.
test-vm: build
	cd $(BUILD) && ctest --output-on-failure -L vm $(CTEST_ARGS)

bench: build
	python3 bench/create --airlockd $(BUILD)/bin/airlockd

# Coverage-guided fuzzing with libFuzzer (clang), 60 s per target.
fuzz: deps
	@CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DAIRLOCK_LIBFUZZER=ON -DAIRLOCK_SANITIZE=ON >/dev/null
	@cmake --build build-fuzz -j$(JOBS)
	@for f in build-fuzz/bin/fuzz-*; do n=$$(basename $$f | sed s/fuzz-//); \
	  mkdir -p build-fuzz/corpus/$$n; \
	  $$f -max_total_time=60 build-fuzz/corpus/$$n tests/fuzz/corpus/$$n || exit 1; done

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) build-fuzz
