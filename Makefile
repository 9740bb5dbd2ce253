# relayd: make build | dist | run | test | pytest | pytest-venv | pytypes | chaos | fuzz | lint | conformance | bench | image | k8s-image | container-test | k8s-test | clean
GO        ?= go
VERSION   ?= 0.1.0
COMMIT    := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
# STAMP is the version the binaries report (relayd --version, ready.version, relayctl --version) and make run's banner shows.
STAMP     := $(VERSION)+$(COMMIT)
LDFLAGS   := -s -w -X main.version=$(STAMP)
BIN       := bin/relayd
LISTEN    ?= 127.0.0.1:7700
RUNDIR    := .run
SHARED    ?= ../shared

.PHONY: build dist run test pytest pytest-venv pytypes chaos fuzz lint conformance clean

## build: static binaries in bin/relayd and bin/relayctl (the controller for people), version stamped
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/relayd
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/relayctl ./cmd/relayctl

## dist: release artifacts in dist/, offline and reproducible: static relayd and relayctl for linux
## amd64 and arm64, the Python client's wheel and sdist (built with the standard library alone), SHA256SUMS
# SOURCE_DATE_EPOCH is the commit's time, so two builds of one commit are the same bytes.
DIST_ARCHES := amd64 arm64
DIST        ?= dist
dist:
	@rm -rf $(DIST) && mkdir -p $(DIST)
	@for a in $(DIST_ARCHES); do \
		for c in relayd relayctl; do \
			echo "== $(DIST)/$$c-linux-$$a"; \
			CGO_ENABLED=0 GOOS=linux GOARCH=$$a $(GO) build -trimpath -buildvcs=false -ldflags '$(LDFLAGS)' -o $(DIST)/$$c-linux-$$a ./cmd/$$c || exit 1; \
		done; \
	done
	@SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || echo 315532800) $(PYTHON) clients/python/build_dist.py $(DIST) | sed 's/^/== /'
	@cd $(DIST) && sha256sum * > SHA256SUMS && cat SHA256SUMS

## run: relayd on $(LISTEN) with a token file, a scratch workspace and readable logs
# The token file is made only when missing, never rewritten: a second make
# run while one runs fails on the taken port, and had it written a new
# token first, the running relayd's would no longer match the file.
# rm $(RUNDIR)/token for a new one. The bridge's socket and the state
# directory are $(RUNDIR)'s too, not relayd's defaults under /run/relayd:
# as root make run would take the machine's (another relayd's socket), and
# as another user it could not make them and would warn twice.
run: build $(RUNDIR)/token
	@mkdir -p $(RUNDIR)/workspace
	@echo "relayd $(STAMP) on $(LISTEN); token in $(RUNDIR)/token (kept; rm it for a new one), workspace $(RUNDIR)/workspace"
	@echo "Talk to it from another terminal:"
	@echo '  T=$$(cat $(RUNDIR)/token)'
	@printf '  printf %s "$$T" | nc -q 1 %s\n' "'{\"token\":\"%s\",\"kind\":\"ready\"}\\n'" "$(subst :, ,$(LISTEN))"
	@echo '  or: RELAYD_TOKEN=$$(cat $(RUNDIR)/token) bin/relayctl exec --addr $(LISTEN) -- echo hello'
	@echo '  or, through its Unix socket: $(BIN) bridge --socket $(RUNDIR)/relayd.sock'
	@echo "(README.md has a whole netcat session, and relayctl's.) Ctrl-C stops relayd."
	@exec $(BIN) --listen $(LISTEN) --token-file $(RUNDIR)/token --workspace $(RUNDIR)/workspace \
		--socket $(RUNDIR)/relayd.sock --state-dir $(RUNDIR)/state --log-format console

# Written under another name and renamed, so that the file is never seen half written.
$(RUNDIR)/token:
	@mkdir -p $(RUNDIR)
	@umask 077; head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' > $@.new && mv $@.new $@

# The race detector needs cgo (gcc); without gcc the tests run without it.
RACE      := $(shell command -v gcc >/dev/null 2>&1 && echo -race)
# FUZZTIME counts executions, not seconds: with a duration, Go 1.26's fuzz
# coordinator can fail a target with "context deadline exceeded" as the
# time runs out, having found nothing (golang/go#75804, fixed in 1.27).
FUZZTIME  ?= 150000x

## test: every Go test, with the race detector where gcc is installed, then the Python client's tests
# -timeout: e2e takes about 24 minutes under the race detector on two
# cores other work shares (37 while every exit of relayd and of its
# shims slept a second); 45 leaves room for a loaded machine and still
# ends a hang.
test:
	$(GO) test $(RACE) -count=1 -timeout 45m ./...
	$(MAKE) --no-print-directory pytest

# The Python client (clients/python) is tested with the system's interpreter,
# not whatever python3 comes first on PATH (a pyenv shim, say): its build
# backend is Debian's python3-setuptools, which only /usr/bin/python3 has.
PYTHON    ?= /usr/bin/python3
# -X dev -W error: any warning (an unclosed socket's ResourceWarning too) fails the run.
PYUNIT    := -X dev -W error -m unittest discover -s tests

## pytest: the Python client's unittest suite against bin/relayd, from the source tree
pytest: build
	cd clients/python && TEST_RELAYD_BIN=$(abspath $(BIN)) PYTHONPATH=src $(PYTHON) $(PYUNIT)

## pytypes: the Python client's type hints checked with mypy --strict (Debian's python3-mypy), for Python 3.9 and this one
pytypes:
	$(PYTHON) -m mypy --strict --python-version 3.9 clients/python/src/relayd_client
	$(PYTHON) -m mypy --strict clients/python/src/relayd_client

## pytest-venv: install the Python client with pip into a fresh venv (the build backend from the system) and run its tests there
pytest-venv: build
	@set -e; venv=$$(mktemp -d /tmp/relayd-pyvenv.XXXXXX); trap 'rm -rf "$$venv" clients/python/build clients/python/src/relayd_client.egg-info' EXIT; \
	echo "== $(PYTHON) -m venv --system-site-packages $$venv"; \
	$(PYTHON) -m venv --system-site-packages "$$venv"; \
	echo "== pip install --no-build-isolation ./clients/python"; \
	PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 "$$venv/bin/pip" install --quiet --no-build-isolation ./clients/python; \
	cd /tmp && "$$venv/bin/python" -c 'import relayd_client, sys; f = relayd_client.__file__; print("== relayd_client from", f); sys.exit(not f.startswith(sys.prefix))'; \
	cd $(CURDIR)/clients/python/tests && TEST_RELAYD_BIN=$(abspath $(BIN)) "$$venv/bin/python" -X dev -W error -m unittest discover -s .

## chaos: CHAOS random scenarios (default 500) against real relayds, with invariants checked after each
CHAOS     ?= 500
chaos:
	RELAYD_CHAOS=$(CHAOS) $(GO) test $(RACE) -count=1 -run '^TestChaos$$' -v -timeout 60m ./e2e/

## fuzz: each fuzz target (internal/protocol, client, internal/exec) for FUZZTIME executions (default 150000x, a few seconds each)
FUZZPKGS := ./internal/protocol/ ./client/ ./internal/exec/
fuzz:
	@for p in $(FUZZPKGS); do \
		for f in $$($(GO) test -list '^Fuzz' $$p | grep '^Fuzz'); do \
			echo "== $$p $$f for $(FUZZTIME)"; \
			$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$p || exit 1; \
		done; \
	done

## lint: formatting and vet
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags docker ./...
	$(GO) vet -tags k8s ./...

## conformance: the shared conformance suite against bin/relayd. The suite is not in this repository:
## it is shared/conformance of the steering repository, checked out beside this one (../shared), or
## SHARED=PATH. Without it (or without python3) the target fails at once with one line saying so.
ifneq ($(filter conformance,$(MAKECMDGOALS)),)
ifeq ($(wildcard $(SHARED)/conformance/run.py),)
$(error make conformance: the conformance suite is not at $(SHARED)/conformance/run.py; it comes from the steering repository: check its shared/ directory out beside this repository as ../shared, or run make conformance SHARED=PATH)
endif
ifeq ($(shell command -v python3),)
$(error make conformance: python3 not found; the conformance suite is a Python 3 program: install python3)
endif
endif
conformance: build
	python3 $(SHARED)/conformance/run.py --relayd $(BIN) --extensions

## bench: the benchmark suite against bin/relayd (about 10 minutes): a table on stdout, the figures in
## bench/results.json. Without sshd the ssh comparison is skipped, saying so; BENCH_INSTALL_SSH=1 opts in to
## installing OpenSSH with apt-get for it (as root). With Docker, the docker section compares docker exec with
## relayd in one container (task image $(TASK_IMAGE), built when missing as make task-image does); without, it
## is skipped, saying so. BENCHFLAGS=--quick for a smoke run, BENCHFLAGS='--only roundtrip,ssh' for some
## sections: roundtrip, ssh, throughput, settle, output, footprint, docker, marks (compare with --before OLD).
BENCHFLAGS        ?=
BENCH_INSTALL_SSH ?=
.PHONY: bench
bench: build
	$(GO) run ./bench/relaybench --relayd $(BIN) --out bench/results.json $(if $(filter 1,$(BENCH_INSTALL_SSH)),--install-ssh) $(BENCHFLAGS)

## image: relayd's image, $(IMAGE): FROM scratch with the static binary make build made (no registry needed)
IMAGE      ?= relayd:dev
TASK_IMAGE ?= relayd-test-task:bookworm
.PHONY: image task-image container-test
# The image a rebuild replaces is removed, so that each commit's build leaves no untagged image behind.
image: build
	@old=$$(docker image inspect --format '{{.Id}}' $(IMAGE) 2>/dev/null); \
	docker build --quiet -t $(IMAGE) . && \
	if [ -n "$$old" ] && [ "$$old" != "$$(docker image inspect --format '{{.Id}}' $(IMAGE))" ]; then \
		docker rmi "$$old" >/dev/null 2>&1 || true; \
	fi

## k8s-image: the init image of deploy/kubernetes's Pods, $(INIT_IMAGE): FROM scratch with /relayd from $(IMAGE), which copies itself (relayd install); no registry needed
INIT_IMAGE ?= relayd-init:dev
.PHONY: k8s-image
# The Dockerfile comes on stdin: the build has no context, it copies only from $(IMAGE).
k8s-image: image
	@old=$$(docker image inspect --format '{{.Id}}' $(INIT_IMAGE) 2>/dev/null); \
	docker build --quiet --build-arg RELAYD_IMAGE=$(IMAGE) -t $(INIT_IMAGE) - < deploy/kubernetes/Dockerfile && \
	if [ -n "$$old" ] && [ "$$old" != "$$(docker image inspect --format '{{.Id}}' $(INIT_IMAGE))" ]; then \
		docker rmi "$$old" >/dev/null 2>&1 || true; \
	fi

## task-image: the test task image, Debian bookworm from debootstrap; made once, reused by its tag
task-image:
	deploy/test/build-task-image.sh $(TASK_IMAGE)

## container-test: the tests under a real Docker engine (e2e/docker*_test.go, build tag docker; compose is docker-compose, else docker compose)
container-test: image task-image
	RELAYD_IMAGE=$(IMAGE) RELAYD_TASK_IMAGE=$(TASK_IMAGE) $(GO) test $(RACE) -tags docker -count=1 -run '^TestDocker' -v -timeout 20m ./e2e/

## k8s-test: a single-node Kubernetes v1.34.2 cluster built here from the Go module proxy and Debian's packages
## (deploy/kubernetes/test/cluster.sh; binaries cached in ~/.cache/relayd-k8s), relayd's Pods applied as trial.sh
## writes them and driven through kubectl exec, then everything torn down and checked gone. Root; no Docker.
.PHONY: k8s-test
k8s-test:
	deploy/kubernetes/test/run.sh

clean:
	rm -rf bin dist $(RUNDIR)
