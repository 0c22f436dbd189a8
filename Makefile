# Two commands do all the set-up on a fresh machine: `make run` and `make test`.
VENV    ?= .venv
# The interpreter .venv is built on: the distribution's own Python (3.11 or
# later, with venv) when there is one, else the first python3 on PATH;
# PYTHON=... overrides. The distribution's is what the service runs
# (systemd/install.sh picks it the same way), and Debian builds it for speed
# (PGO and LTO, libpython linked in): an agent starts on about 25 % less CPU
# than on a pyenv build (--enable-shared, no PGO). docs/operations.md.
PYTHON  ?= $(firstword $(foreach p,/usr/bin/python3 python3,$(shell $(p) -c \
  'import sys, ensurepip; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1 && echo $(p))))
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-run
# command:Debian package, for what the LAN tests run (dig, dnsmasq and
# prometheus: the DNS interface's and service discovery's tests; dnsmasq-base
# has no service; prometheus's postinst starts its service only where systemd
# runs: docs/operations.md, "Prometheus").
TOOLS   := ip:iproute2 nft:nftables sysctl:procps systemd-analyze:systemd setpriv:util-linux faketime:faketime chromium:chromium chromedriver:chromium-driver zsh:zsh dig:dnsutils dnsmasq:dnsmasq-base prometheus:prometheus
SHOAL   := $(VENV)/bin/shoal
LINT_VENV  := .venv-lint
LINT_STAMP := $(LINT_VENV)/.installed

.PHONY: run test test-slow bench lint sysdeps clean bytecode lock native compiler

# SHOAL_PURE=1 (make SHOAL_PURE=1 ..., or in the environment) builds pure Python.
export SHOAL_PURE

# `make run` installs shoal and its runtime dependencies only (a 75 MB venv);
# `make test` adds what the tests, the Spark job and the linters need
# (pyspark alone is about 490 MB).
$(RUN_STAMP): pyproject.toml setup.py
	@test -n "$(PYTHON)" || { echo "make: no Python 3.11+ with venv (Debian: python3-venv); set PYTHON=" >&2; exit 2; }
	@echo "make: creating $(VENV) with $(PYTHON)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	@$(MAKE) --no-print-directory compiler
	@echo "make: installing shoal and its runtime dependencies into $(VENV) (uvloop, zeroconf, rocksdict, ...)"
	@echo "make: compiling the hot path with mypyc (a minute or two; SHOAL_PURE=1 skips it: setup.py)"
	@# -qq: setuptools' notice about folders named like the package is noise
	@# here (the repository root *is* the package `shoal`: pyproject.toml).
	$(PY) -m pip install -qq --disable-pip-version-check -e .
	@$(PY) -c 'import shoal.native as n; print("make: shoal runs", n.describe())'
	touch $@

# The extras by name, not `-e '.[test,dev]'`: that would build (compile) shoal again.
$(STAMP): $(RUN_STAMP) pyproject.toml
	@echo "make: installing what the tests need into $(VENV) (pyspark, pytest, selenium, mypy, ...; a minute or two the first time)"
	$(PY) -c 'import tomllib; x = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]; print(*x["test"], *x["dev"], sep="\n")' > $(VENV)/extras.txt
	$(PY) -m pip install -qq --disable-pip-version-check -r $(VENV)/extras.txt
	touch $@

# The compiled path (setup.py): mypyc compiles the hot modules in place. After
# editing one of them the agent and the simulator run pure Python (a stale
# build is never loaded: native.py) until `make native` compiles again.
native: $(RUN_STAMP)
	$(PY) -m pip install -qq --disable-pip-version-check --no-deps -e .
	@$(PY) -c 'import shoal.native as n; print("make: shoal runs", n.describe())'

# A C compiler and Python's headers for the compiled path: root installs
# Debian's; without them the build is pure Python (and says so).
compiler:
	@if [ -z "$$SHOAL_PURE" ] && ! { command -v cc >/dev/null && \
	  test -f "$$($(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h"; }; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc python3-dev; \
	  else echo "note: no C compiler or no Python.h, not root: shoal installs as pure Python"; fi; \
	fi

# Every agent a test, a bench or the demo starts imports about 60 of our
# modules: compiled once here, not by each process (an environment with
# PYTHONDONTWRITEBYTECODE would otherwise compile them at every start, about
# 0.1 s of CPU per agent). Only what changed is compiled again.
bytecode: $(RUN_STAMP)
	@$(PY) -m compileall -q -j 0 __init__.py kernel node daemon membership election storage churn sim client

# Debian packages the LAN tests need (network namespaces, packet loss), the
# browser the status page's and the churn report's tests drive, dig and Prometheus.
sysdeps:
	@missing=""; for t in $(TOOLS); do \
	  PATH="$$PATH:/usr/sbin:/sbin" command -v $${t%%:*} >/dev/null 2>&1 || missing="$$missing $${t#*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else echo "note: not root, not installing:$$missing (LAN tests will skip)"; fi; \
	fi

# A demo cluster of agents on loopback: it forms, elects a controller, loses
# it, elects another, heals.
run: $(RUN_STAMP) bytecode
	$(SHOAL) demo --nodes 5

# Two processes: the tests that start agents in one, the simulator's, unit
# and Spark tests beside them at nice 10 (tests/split.py says why); the
# slowest tests are listed at the end, to keep the whole under 25 minutes.
test: $(STAMP) bytecode sysdeps lint
	$(PY) tests/split.py --durations=25

# Slow runs: big simulations, and a real systemd booted in a container.
test-slow: $(STAMP) bytecode sysdeps
	@if [ "$$(id -u)" = 0 ] && ! command -v systemd-nspawn >/dev/null; then apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap systemd-container; fi
	$(PY) -m pytest -m slow

# Peers run side by side (root installs them): serf, wrk, etcd, ZooKeeper; dnsperf.
bench: $(STAMP) bytecode
	@if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive 	  apt-get install -y -qq serf wrk etcd-server etcd-client zookeeper dnsperf; fi
	$(PY) -m pip install -q --disable-pip-version-check -e '.[bench]'
	$(PY) bench/sim_scale.py
	$(PY) bench/detect_vs_serf.py
	$(PY) bench/false_positives.py
	$(PY) bench/cli.py
	$(PY) bench/encryption.py
	$(PY) bench/storage.py
	$(PY) bench/election.py
	$(PY) bench/meta.py
	$(PY) bench/churn.py
	$(PY) bench/watch.py
	$(PY) bench/events.py
	$(PY) bench/sessions.py
	$(PY) bench/ui.py cost
	$(PY) bench/dns.py

# Style, types (mypy strict on the whole package) and the layering contracts
# (import-linter, pyproject.toml). `make test` runs it first.
lint: $(STAMP) $(LINT_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	@mkdir -p build/typecheck && ln -sfn ../.. build/typecheck/shoal
	$(VENV)/bin/mypy
	PYTHONPATH=build/typecheck $(LINT_VENV)/bin/lint-imports

# import-linter in a venv of its own: its dependency rich, once installed,
# is imported by structlog in every agent of .venv (pyproject.toml, dev).
$(LINT_STAMP):
	$(PYTHON) -m venv $(LINT_VENV)
	$(LINT_VENV)/bin/python -m pip install -qq --disable-pip-version-check 'import-linter>=2.1'
	touch $@

# The versions a service install uses (systemd/install.sh installs with
# `-c systemd/constraints.txt`): resolved in a clean venv from pyproject.toml's
# runtime dependencies. Run after changing them, and commit the file.
lock:
	rm -rf build/lock && $(PYTHON) -m venv build/lock
	build/lock/bin/pip install -q --disable-pip-version-check .
	{ echo "# Generated by \`make lock\` from pyproject.toml's runtime dependencies; do not edit."; \
	  build/lock/bin/pip freeze --exclude-editable | grep -iv '^shoal[=@ ]'; } > systemd/constraints.txt
	@echo "make: wrote systemd/constraints.txt"

clean:
	rm -rf $(VENV) $(LINT_VENV) .pytest_cache build *.egg-info native-build.txt *.so */*.so */*/*.so
