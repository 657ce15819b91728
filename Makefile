# The front door. `make lab` and `make test` install what they need first.
.PHONY: deps build lab test deploy-check demo bench clean

JOBS ?= $(shell nproc)

deps:
	./scripts/install-deps.sh

build: deps
	cmake --preset default >/dev/null
	cmake --build --preset default -j $(JOBS)

# The plan's whole experiment (docs/lab.md). Builds only what it runs.
lab: deps
	cmake --preset default >/dev/null
	cmake --build --preset default -j $(JOBS) --target gpureap gpureap-worker gpureap-worker-dynamic gpureap-init
	./build/default/src/cli/gpureap lab $(LAB_ARGS)

test: deps
	./scripts/test.sh

# The deployment on this machine (docs/deploy-images.md): every image built,
# pushed, pulled and run by containerd; the Debian package booted in a clean
# Debian 12 root. Builds only what the images and the package hold.
deploy-check: deps
	cmake --preset default >/dev/null
	cmake --build --preset default -j $(JOBS) --target gpureap gpureap-exporter gpureap-worker gpureap-worker-dynamic gpureap-init
	ctest --preset default -L deploy

demo: build
	./scripts/demo.sh

bench: build
	./bench/run.sh

clean:
	rm -rf build
