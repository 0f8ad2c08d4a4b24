# neardup: the two commands of the README are `make demo` and `make test`.
#
#   make install        create .venv (if missing) and install neardup with the dev extra
#   make test           install, run the checks, then the legs: the whole suite on the default
#                       engine (Elasticsearch 9.5.4, or ENGINE/VERSION), then the engine matrix
#                       (the files of tests/engine-matrix.txt on each engine:version of MATRIX);
#                       each leg starts its own node (scripts/test-leg) and prints its counts and
#                       wall time; fails if any leg fails, after running them all
#   make check          lint (ruff), types (mypy) and the documentation site (mkdocs --strict)
#   make browser-deps   Debian's chromium + chromedriver for the playground's browser test
#                       (apt-get, as root; instant when both are installed; run by make test)
#   make es8client      elasticsearch-py 8 in run/es8client, first on PYTHONPATH for the tests
#                       on Elasticsearch 8 (run by make test; once per checkout)
#   make demo           install, start the engine, load Reuters-21578, enrich it, search
#                       directly and through the proxy (DATA=path, DOCS=n; KEEP=1 leaves
#                       the node running: scripts/es status --home run/es-demo)
#   make es-start       start a development node (ES_PORT, ES_SECURITY), make es-stop stops it
#                       (ENGINE=elasticsearch|opensearch and VERSION=... choose the server for
#                       test, demo and es-start; default Elasticsearch 9.5.4)
#   make bench          run the benchmarks under bench/ against a fresh node
#
# Variables: PYTHON (python3), PYTEST_ARGS (extra pytest arguments, for every leg; with a
# selection such as -k, set MATRIX= too), DATA (folder of the shared data, default
# ../shared/data), DOCS (stories loaded by the demo), ES_PORT (9200), ES_SECURITY
# (off|basic|tls), ES_HEAP (1g), MATRIX (the matrix's engine:version legs; empty: no matrix; a
# leg equal to ENGINE:VERSION is not run twice).

SHELL := /bin/bash
# rustup's cargo builds the proxy's compiled parts at install (pyproject.toml): found also when
# the calling shell did not source ~/.cargo/env (a non-interactive bash, CI).
CARGO_BIN := $(HOME)/.cargo/bin
export PATH := $(if $(wildcard $(CARGO_BIN)/cargo),$(CARGO_BIN):)$(PATH)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
DATA ?=
DOCS ?= 3000
ES_PORT ?= 9200
ES_SECURITY ?= off
ES_HEAP ?= 1g
ENGINE ?=
VERSION ?=
ES_SERVER := $(if $(ENGINE),--engine $(ENGINE)) $(if $(VERSION),--version $(VERSION))
TEST_ES_HOME := run/es-test
DEMO_ES_HOME := run/es-demo
BENCH_ES_HOME := run/es-bench
MATRIX ?= elasticsearch:8.19.21 opensearch:3.8.0 opensearch:2.19.6
MATRIX_LIST := tests/engine-matrix.txt
MATRIX_FILES := $(shell sed -e 's/\#.*//' $(MATRIX_LIST))
ES8_CLIENT := run/es8client
TEST_SUMMARY := run/test-summary.txt
# The demo on Elasticsearch 8 needs elasticsearch-py 8 first on the path (see es8client).
DEMO_PYTHONPATH := $(if $(filter opensearch,$(ENGINE)),,$(if $(filter 8.%,$(VERSION)),PYTHONPATH=$(ES8_CLIENT)))

.PHONY: install check browser-deps es8client test demo es-start es-stop es-status bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

install: $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[dev]"

# The playground's end-to-end test drives Debian's Chromium through Debian's chromedriver
# (tests/test_playground_browser.py). Installed with apt-get when missing: as root (CI), or with
# passwordless sudo; otherwise a warning, and the browser tests skip (they fail under CI=true).
browser-deps:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then sudo=""; elif sudo -n true 2>/dev/null; then sudo="sudo -n"; \
	else echo "make browser-deps: chromium/chromedriver missing and not root: run" \
	  "'apt-get install -y chromium chromium-driver' as root; the browser tests will skip" >&2; exit 0; fi; \
	echo "make browser-deps: installing chromium and chromium-driver (Debian packages)"; \
	$$sudo apt-get update -qq && \
	DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends \
	  chromium chromium-driver fonts-dejavu-core >/dev/null

# Quick, so they run before the suite: a finding fails the run.
check: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir run/site

# elasticsearch-py 9 sends compatible-with=9, which Elasticsearch 8 refuses: its legs put
# elasticsearch-py 8 first on PYTHONPATH (tests/test_clients.py also runs it against 9.x).
es8client: $(ES8_CLIENT)/elasticsearch/__init__.py

$(ES8_CLIENT)/elasticsearch/__init__.py: | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --target $(ES8_CLIENT) \
	  "elasticsearch>=8.12,<9" "elastic-transport>=8.15,<9"

# Every leg runs, even after one fails; the status is a failure if any failed ("no tests
# collected" counts as a failure). Each leg's node is stopped whatever happens, including Ctrl-C,
# which also ends the run. The matrix's list is checked before anything starts.
test: install check browser-deps es8client
	@for file in $(MATRIX_FILES); do [ -f "$$file" ] || { \
	  echo "make test: $$file (listed in $(MATRIX_LIST)) does not exist" >&2; exit 2; }; done; \
	for leg in $(MATRIX); do case $$leg in ?*:?*) ;; *) \
	  echo "make test: MATRIX entry '$$leg' is not engine:version" >&2; exit 2;; esac; done; \
	trap 'exit 130' INT TERM; \
	mkdir -p run; : > $(TEST_SUMMARY); status=0; \
	run_leg() { scripts/test-leg --heap $(ES_HEAP) --summary $(TEST_SUMMARY) "$$@"; s=$$?; \
	  [ $$s -ne 130 ] || exit 130; [ $$s -eq 0 ] || status=1; }; \
	run_leg $(ES_SERVER) --home $(TEST_ES_HOME) -- $(PYTEST_ARGS); \
	for leg in $(MATRIX); do \
	  [ "$$leg" != "$(ENGINE):$(VERSION)" ] || continue; \
	  run_leg --engine $${leg%%:*} --version $${leg#*:} --home $(TEST_ES_HOME)-$${leg/:/-} \
	    -- $(MATRIX_FILES) $(PYTEST_ARGS); \
	done; \
	echo; echo "make test:"; sed 's/^/  /' $(TEST_SUMMARY); exit $$status

demo: install $(if $(DEMO_PYTHONPATH),es8client)
	@trap '[ -n "$(KEEP)" ] || scripts/es stop --home $(DEMO_ES_HOME)' EXIT; trap 'exit 130' INT TERM; \
	scripts/es start $(ES_SERVER) --home $(DEMO_ES_HOME) --port auto --security off --heap $(ES_HEAP) --fresh >/dev/null || exit 1; \
	NEARDUP_DEMO_ES_URL=$$(scripts/es url --home $(DEMO_ES_HOME)) $(DEMO_PYTHONPATH) $(PY) scripts/demo $(if $(DATA),--data $(DATA)) --docs $(DOCS)

es-start:
	scripts/es start $(ES_SERVER) --port $(ES_PORT) --security $(ES_SECURITY) --heap $(ES_HEAP)

es-stop:
	scripts/es stop --port $(ES_PORT)

es-status:
	scripts/es status --port $(ES_PORT)

# The benchmarks against a fresh node; each replaces its own section of docs/benchmarks.md
# when asked (--results docs/benchmarks.md; see the scripts' --help). quality.py runs --quick.
bench: install
	@trap 'scripts/es stop --home $(BENCH_ES_HOME) --purge' EXIT; trap 'exit 130' INT TERM; \
	scripts/es start --home $(BENCH_ES_HOME) --port auto --heap $(ES_HEAP) --fresh >/dev/null || exit 1; \
	url=$$(scripts/es url --home $(BENCH_ES_HOME)); \
	set -e; \
	echo "== bench/fingerprint.py"; $(PY) bench/fingerprint.py; \
	echo "== bench/indexer.py"; NEARDUP_TEST_ES_URL=$$url $(PY) bench/indexer.py --es-url $$url; \
	echo "== bench/proxy.py"; $(PY) bench/proxy.py --es $$url; \
	echo "== bench/quality.py --quick"; $(PY) bench/quality.py --quick

clean:
	-for home in $(TEST_ES_HOME) $(TEST_ES_HOME)-*; do [ ! -d "$$home" ] || scripts/es stop --home "$$home" --purge; done
	-scripts/es stop --home $(DEMO_ES_HOME) --purge
	-scripts/es stop --home $(BENCH_ES_HOME) --purge
	rm -rf .pytest_cache
