# The message centre. `make run` serves it on embedded defaults; `make test`
# runs the whole suite (against real PostgreSQL/Redis when DATABASE_URL and
# REDIS_URL are set, as .ci/run does).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements.txt | cksum | cut -d' ' -f1)
HOST ?= 127.0.0.1
PORT ?= 8000
PYTEST_ARGS ?=

.PHONY: setup migrate demo run test lint format bench cluster-up cluster-down clean

$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	rm -f $(VENV)/.installed-* && touch $(STAMP)

setup: $(STAMP)

migrate: setup
	$(PY) manage.py migrate --noinput

demo: migrate
	$(PY) manage.py seed_demo

run: migrate
	$(PY) manage.py serve $(HOST):$(PORT)

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy core notices messagecenter config

format: setup
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

bench: setup
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-bench.txt
	$(PY) -m bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) db.sqlite3 staticfiles
