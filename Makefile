# neardup: the two commands of the README are `make demo` and `make test`.
#
#   make install        create .venv (if missing) and install neardup with the dev extra
#   make test           install, run the checks, start Elasticsearch (scripts/es), run the whole
#                       suite, stop it
#   make check          lint (ruff), types (mypy) and the documentation site (mkdocs --strict)
#   make browser-deps   Debian's chromium + chromedriver for the playground's browser test
#                       (apt-get, as root; instant when both are installed; run by make test)
#   make demo           install, start Elasticsearch, load Reuters-21578, enrich it, search
#                       directly and through the proxy (DATA=path, DOCS=n; KEEP=1 leaves
#                       the node running: scripts/es status --home run/es-demo)
#   make es-start       start a development node (ES_PORT, ES_SECURITY), make es-stop stops it
#                       (ENGINE=elasticsearch|opensearch and VERSION=... choose the server for
#                       test, demo and es-start; default Elasticsearch 8.19.21)
#   make bench          run the benchmarks under bench/ against a fresh node
#
# Variables: PYTHON (python3), PYTEST_ARGS (extra pytest arguments), DATA (folder of the shared
# data, default ../shared/data), DOCS (stories loaded by the demo), ES_PORT (9200),
# ES_SECURITY (off|basic|tls), ES_HEAP (1g).

SHELL := /bin/bash
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

.PHONY: install check browser-deps test demo es-start es-stop es-status bench clean

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

# Exit status is pytest's; "no tests collected" (5) counts as a failure. The node is stopped
# whatever happens, including Ctrl-C.
test: install check browser-deps
	@trap 'scripts/es stop --home $(TEST_ES_HOME) --purge' EXIT; trap 'exit 130' INT TERM; \
	scripts/es start $(ES_SERVER) --home $(TEST_ES_HOME) --port auto --security off --heap $(ES_HEAP) --fresh >/dev/null || exit 1; \
	NEARDUP_TEST_ES_URL=$$(scripts/es url --home $(TEST_ES_HOME)) $(PY) -m pytest $(PYTEST_ARGS); \
	status=$$?; \
	if [ $$status -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; \
	exit $$status

demo: install
	@trap '[ -n "$(KEEP)" ] || scripts/es stop --home $(DEMO_ES_HOME)' EXIT; trap 'exit 130' INT TERM; \
	scripts/es start $(ES_SERVER) --home $(DEMO_ES_HOME) --port auto --security off --heap $(ES_HEAP) >/dev/null || exit 1; \
	NEARDUP_DEMO_ES_URL=$$(scripts/es url --home $(DEMO_ES_HOME)) $(PY) scripts/demo $(if $(DATA),--data $(DATA)) --docs $(DOCS)

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
	-scripts/es stop --home $(TEST_ES_HOME) --purge
	-scripts/es stop --home $(DEMO_ES_HOME) --purge
	-scripts/es stop --home $(BENCH_ES_HOME) --purge
	rm -rf .pytest_cache
