# The message centre. `make run` serves it on embedded defaults; `make test`
# runs the whole suite (against real PostgreSQL/Redis when DATABASE_URL and
# REDIS_URL are set, as .ci/run does).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Stamps of what the venv holds, keyed on the files' checksums: the runtime
# (make run), and the runtime plus the test and lint tools (every other target).
STAMP := $(VENV)/.installed-run-$(shell cat requirements.txt | cksum | cut -d' ' -f1)
DEV_STAMP := $(VENV)/.installed-dev-$(shell cat requirements.txt requirements-dev.txt | cksum | cut -d' ' -f1)
HOST ?= 127.0.0.1
PORT ?= 8000
PYTEST_ARGS ?=
# pytest-xdist workers of make test and make test-cluster (0: one process). Each
# worker takes a test slot of its own (config/settings/test.py: a Redis db, a
# PostgreSQL test database, a key prefix on the cluster); there are 12 slots.
TEST_WORKERS ?= 2

.PHONY: messages setup setup-dev migrate demo run test test-cluster coverage lint docs compat-check format bench bench-scale bench-rebuild drill cluster-up cluster-down clean

$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	rm -f $(VENV)/.installed-* && touch $(STAMP)

# requirements-dev.txt includes requirements.txt: the runtime stamp holds too.
$(DEV_STAMP): requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	rm -f $(VENV)/.installed-* && touch $(STAMP) $(DEV_STAMP)

setup: $(STAMP)

setup-dev: $(DEV_STAMP)

migrate: setup
	$(PY) manage.py migrate --noinput

demo: migrate
	$(PY) manage.py seed_demo

run: migrate
	$(PY) manage.py vapid_keys --write
	$(PY) manage.py serve $(HOST):$(PORT)

test: setup-dev
	$(PY) -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

# The Redis-facing tests with the read model on the local six-node Redis
# Cluster (Django's cache stays on plain Redis). Starts the cluster when none
# answers on port 7000 and then stops it again, unless another run still uses
# it; a cluster started by hand is left alone (scripts/redis-cluster.sh with).
# tests/security (input validation, no Redis behaviour), tests/compat (the
# drop-in reaches the inbox only through its services, whose Redis behaviour
# the messagecenter tests cover here) and the read-replica tests (marker
# replica: PostgreSQL routing) run in the other passes only.
CLUSTER_PYTEST_ARGS ?= -m 'not browser and not replica' --ignore=tests/browser --ignore=tests/security --ignore=tests/compat tests
test-cluster: setup-dev
	MESSAGECENTER_REDIS_CLUSTER_URL=redis://127.0.0.1:7000 \
	DATABASE_URL="$${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/messagecenter}" \
	REDIS_URL="$${REDIS_URL:-redis://127.0.0.1:6379/15}" \
	  bash scripts/redis-cluster.sh with $(PY) -m pytest -n $(TEST_WORKERS) $(CLUSTER_PYTEST_ARGS)

# Coverage of the product packages ([tool.coverage] in pyproject.toml): the
# report names the modules short of full coverage and their missing lines, and
# fails under 90%. COVERAGE_ARGS chooses the tests (the whole suite by default).
COVERAGE_ARGS ?=
coverage: setup-dev
	$(PY) -m pytest -n $(TEST_WORKERS) --cov --cov-report= $(COVERAGE_ARGS)
	$(PY) -m coverage report --fail-under=90

# The import rules: import-linter's contracts (layers core < notices <
# messagecenter, no cycles between sibling modules; pyproject.toml) and
# scripts/check_imports.py (imports at module top, no module-level cycles).
# Public APIs only: ruff's SLF001 and scripts/check_private.py (libraries'
# internals, private writes, patching, routes in front of Django;
# scripts/private_allowlist.toml).
# Dead code: vulture at 80% confidence over the product, scripts, bench and
# tests (a fixture wanted for its effect only goes in pytest.mark.usefixtures)
# (vulture_whitelist.py: names a framework passes by keyword, with reasons).
# Complexity: ruff's C901 and size rules (pyproject.toml), and radon's count
# per product function at most 15 (scripts/check_complexity.py).
# mypy runs twice: the tests and the bench import scripts/ as a package
# (scripts.pg_replica_pair) while the first run checks its files as top-level
# modules, and one run cannot hold both names for one file.
VULTURE_PATHS := core durability audit insight accounts webhooks live notices messagecenter config compat/notifications scripts bench tests vulture_whitelist.py
lint: setup-dev
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy core durability audit insight accounts webhooks live notices messagecenter config scripts compat/notifications
	$(PY) -m mypy tests bench
	PYTHONPATH=compat $(VENV)/bin/lint-imports --no-cache --no-logo
	$(PY) scripts/check_imports.py
	$(PY) scripts/check_private.py
	$(PY) -m vulture $(VULTURE_PATHS) --min-confidence 80 --exclude '*/migrations/*,*/.venv-incumbent/*'
	$(PY) scripts/check_complexity.py

# The documentation site (Material for MkDocs, mkdocs.yml) from docs/ into
# site/, warnings as errors. First the API pages: the OpenAPI document on the
# embedded defaults (offline: no PostgreSQL, Redis or network) and the list of
# endpoints made from it; both generated, gitignored.
docs: setup-dev
	env -u DATABASE_URL -u DATABASE_REPLICA_URLS -u REDIS_URL -u CELERY_BROKER_URL DJANGO_SETTINGS_MODULE=config.settings.local \
	  $(PY) manage.py spectacular --format openapi-json --file docs/api/openapi.json
	$(PY) scripts/openapi_endpoints.py docs/api/openapi.json docs/api/endpoints.md
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --clean

# django-notifications-hq 1.8.3's own test suite, unmodified, against the drop-in
# compat/notifications (scripts/compat_check.py): the sdist downloaded with pip
# and checked against its pinned sha256, only its tests taken, into a temporary
# directory; run on PostgreSQL and Redis (DATABASE_URL/REDIS_URL, else the
# machine's), then on the embedded defaults. Each pass must show 29 passed.
compat-check: setup-dev
	$(PY) scripts/compat_check.py

# Translations: extract the strings of the pages, their scripts and the API's
# messages into locale/*/LC_MESSAGES/*.po, then compile the .mo files that are
# committed (make run and make test need no gettext). Extraction needs GNU
# gettext; Debian's package is installed only when xgettext is missing.
MESSAGES_ARGS := --ignore=.venv --ignore=staticfiles --ignore=bench --ignore=tests -l en -l zh_Hans
messages: setup-dev
	command -v xgettext >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gettext)
	$(PY) manage.py makemessages $(MESSAGES_ARGS) --no-obsolete
	$(PY) manage.py makemessages -d djangojs $(MESSAGES_ARGS) --no-obsolete
	$(PY) manage.py compilemessages --ignore=.venv

format: setup-dev
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

INCUMBENT := bench/.venv-incumbent
INCUMBENT_STAMP := $(INCUMBENT)/.installed-$(shell cat bench/requirements-incumbent.txt | cksum | cut -d' ' -f1)

# The incumbent (django-notifications-hq 1.8.3) needs Django 4.2: its own venv.
$(INCUMBENT_STAMP): bench/requirements-incumbent.txt
	test -x $(INCUMBENT)/bin/python || $(PYTHON) -m venv $(INCUMBENT)
	$(INCUMBENT)/bin/python -m pip install -q --disable-pip-version-check -r bench/requirements-incumbent.txt
	rm -f $(INCUMBENT)/.installed-* && touch $(INCUMBENT_STAMP)

bench: setup-dev $(INCUMBENT_STAMP)
	command -v wrk >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk)
	$(PY) -m bench $(BENCH_ARGS)

# The scale run (bench/scale.py, not in CI): a private redis-server on a spare
# port filled through the read model's write path with 1,000,000 users and
# 10,000,000 inbox entries (about 4 GB of memory and several minutes here),
# then memory per user and entry, read latency and the fan-out rate; writes
# bench/SCALE.md and stops that Redis by its PID. Smaller: SCALE_ARGS="--users
# 100000 --entries 1000000" (the report says it is smaller).
SCALE_ARGS ?=
bench-scale: setup-dev
	$(PY) -m bench.scale $(SCALE_ARGS)

# The rebuild time (bench/rebuild_time.py, not in CI): users and a little state
# made in the bench's PostgreSQL, then durability.rebuild.rebuild() timed on an empty
# private redis-server (stopped by its PID); writes bench/REBUILD.md. Larger:
# REBUILD_ARGS="--users 200000".
REBUILD_ARGS ?=
bench-rebuild: setup-dev
	$(PY) -m bench.rebuild_time $(REBUILD_ARGS)

# The fault drill (bench/drill): gunicorn, a Celery worker and beat, a private
# redis-server and a private PostgreSQL cluster on spare ports, under load,
# with one fault at a time; writes bench/DRILLS.md.
# DRILL_ARGS=--quick: a 15 s Redis outage instead of 120 s.
DRILL_ARGS ?=
drill: setup-dev
	$(PY) -m bench.drill $(DRILL_ARGS)

# The local six-node Redis Cluster by hand (ports 7000-7005), e.g. to try the
# read model on it; make test-cluster leaves a cluster started this way up
# (stop it only when no test run is using it).
cluster-up:
	bash scripts/redis-cluster.sh start

cluster-down:
	bash scripts/redis-cluster.sh stop

clean:
	rm -rf $(VENV) db.sqlite3 staticfiles
