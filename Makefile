PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench lint docs reference clean chromium bwrap pgbouncer

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install -qq -e '.[test,postgres,bench,otel]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m kanban.cli.demo

# Most tests start real processes (CLI, dispatcher, forkserver, MCP servers): the code is
# compiled once here, since a PYTHONDONTWRITEBYTECODE environment would have each of them
# compile it again (half a second apiece). Three pytest processes keep both cores busy
# while tests wait on their children; a file's tests stay in one process.
TEST_PROCS ?= 3
test: $(STAMP) chromium bwrap pgbouncer
	$(PY) -m compileall -q -j 0 kanban state agent tools worker cron dispatcher tests bench \
	  scripts >/dev/null
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_PROCS) --dist loadfile

# The browser tests drive Debian's chromium through Playwright (never a downloaded browser):
# installed here when missing and we are root; elsewhere they skip and say why (CI=true
# turns that skip into a failure).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's chromium for the browser tests"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium \
	      >/dev/null; \
	  else echo "chromium is missing: the browser tests will skip"; fi; }

# The sandbox tests run commands in Debian's bubblewrap, and a sandbox's own network through
# slirp4netns: installed the same way (CI=true turns their skip into a failure).
bwrap:
	@command -v bwrap >/dev/null 2>&1 && command -v slirp4netns >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's bubblewrap and slirp4netns for the sandbox tests"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap \
	      slirp4netns >/dev/null; \
	  else echo "bwrap or slirp4netns is missing: sandbox tests will skip"; fi; }

# The PostgreSQL fleet tests put Debian's pgbouncer (transaction pooling) in front of the
# server, each on a port and config of its own: installed the same way (CI=true turns their
# skip into a failure).
pgbouncer:
	@test -x /usr/sbin/pgbouncer || command -v pgbouncer >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's pgbouncer for the PostgreSQL fleet tests"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer \
	      >/dev/null; \
	  else echo "pgbouncer is missing: the PostgreSQL fleet tests will skip"; fi; }

bench: $(STAMP)
	$(PY) -m bench
	$(PY) -m tests.docs.consoledoc --rows README.md $$(find docs -name '*.md' | sort)

# The documentation site (docs/, mkdocs.yml) into site/; --strict: a broken link or a page
# missing from the nav fails the build.
docs: $(STAMP)
	$(PY) -m pip install -qq -e '.[docs]'
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# docs/reference/cli.md and config.md, generated from the click commands and from config.toml's
# declared keys; tests/unit/test_reference.py fails while they are stale.
reference: $(STAMP)
	$(PY) -m kanban.cli.reference

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) scripts/typecheck.py

clean:
	rm -rf $(VENV) .kanban-demo build site
