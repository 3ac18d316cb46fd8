# specmon developer entry points. `make test` works on a fresh Debian/Ubuntu machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: test check demo venv sysdeps pydeps lint bench clean

# A fresh Debian/Ubuntu may lack python3 or its venv module (python3-venv).
pydeps:
	@$(PY) -c 'import ensurepip, venv' >/dev/null 2>&1 || { \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends \
			python3 python3-venv >/dev/null; }

$(BIN)/python: | pydeps
	$(PY) -m venv $(VENV)

# the test tools (pytest, mypy, ruff, import-linter, ...) come with `make test`/`make lint`
venv: $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'

# Integration tests start their own OpenSSH server on loopback (tests/sshd.py: sshd, ssh-keygen;
# the benchmarks also use the ssh client) and need tmux; promtool (Debian's prometheus package, no
# service is started) checks examples/specmon-alerts.yml. Only what is missing is installed.
sysdeps:
	@pkgs=""; \
	{ command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ]; } || pkgs="$$pkgs openssh-server"; \
	{ command -v ssh >/dev/null 2>&1 && command -v ssh-keygen >/dev/null 2>&1; } \
		|| pkgs="$$pkgs openssh-client"; \
	command -v tmux >/dev/null 2>&1 || pkgs="$$pkgs tmux"; \
	command -v promtool >/dev/null 2>&1 || pkgs="$$pkgs prometheus"; \
	if [ -n "$$pkgs" ]; then \
		echo "make sysdeps: installing$$pkgs"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends \
			$$pkgs >/dev/null; \
	fi

# ruff, the layer contracts ([tool.importlinter] in pyproject.toml), mypy ([tool.mypy])
# vulture: dead code (names only frameworks or tests reach are in vulture_whitelist.py)
VULTURE_IGNORE := on_*,action_*,watch_*,compose,do_GET,do_POST,do_HEAD,log_message,can_replace,render_line,get_system_commands,check_action
lint: venv
	$(BIN)/ruff check specmon tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/vulture specmon vulture_whitelist.py --min-confidence 60 --ignore-names '$(VULTURE_IGNORE)'

# The fast loop while working: lint, layers, types and the unit tests (tests/unit).
check: venv lint
	$(BIN)/python -m pytest -n 2 -q -m unit

test: sysdeps venv lint
	$(BIN)/python -m pytest -n 2 -q

# only what the demo needs (the package and its runtime dependencies, no test tools): a fresh
# clone's first frame comes in seconds, not after installing pytest, mypy and friends
demo: $(BIN)/python
	$(BIN)/pip install -q --disable-pip-version-check -e .
	$(BIN)/specmon demo

# Every benchmark, briefly, then one table of ratios (each against a reference measured in the
# same run). `make bench AGAINST=9713ef5` (a git rev, or a wheel file) adds parse vs that version.
bench: sysdeps venv
	$(BIN)/python bench/run_all.py $(if $(AGAINST),--against $(AGAINST))

clean:
	rm -rf $(VENV) dist build .pytest_cache .ruff_cache
