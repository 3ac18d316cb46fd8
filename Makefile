# specmon developer entry points. `make test` works on a fresh Debian/Ubuntu machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: test demo venv sysdeps lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

venv: $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'

# Integration tests need a real OpenSSH server (started by the tests on loopback) and tmux.
sysdeps:
	@if ! command -v sshd >/dev/null 2>&1 && [ ! -x /usr/sbin/sshd ] || ! command -v tmux >/dev/null 2>&1 \
		|| ! command -v ssh-keygen >/dev/null 2>&1 || ! command -v ssh >/dev/null 2>&1; then \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq openssh-server openssh-client tmux >/dev/null; \
	fi

lint: venv
	$(BIN)/ruff check specmon tests bench

test: venv sysdeps
	$(BIN)/ruff check specmon tests bench
	$(BIN)/python -m pytest -n 2 -q

demo: venv
	$(BIN)/specmon demo

bench: venv sysdeps
	$(BIN)/python bench/parse_speed.py
	$(BIN)/python bench/tail_throughput.py

clean:
	rm -rf $(VENV) dist build .pytest_cache .ruff_cache
