# agora: the two commands are `make up` and `make test`.
SHELL := /bin/bash
STACK := deploy/local/stack.sh
PY := .venv/bin/python
SUB ?= 7
ACCOUNTS ?= 1
TRACES ?= 0
# The Redis the services use: single (the default) or cluster (3 masters + 3 replicas, local).
REDIS ?= single
# The SQL datastores: 0, the single MariaDB and PostgreSQL (the default), or 1, their HA engines
# (Patroni + etcd, Galera + garbd, HAProxy on the same ports; docs/high-availability.md).
HA ?= 0
# make test's second run, on the test Redis Cluster: the suites that touch Redis streams (and of
# the replies', the receipts through the streams), presence's sharded pub/sub, and the search
# indexer's reads of the wake streams (one per slot) and the feeds; only the
# paths that exist (pytest stops at a missing path). Not tests/redis_cluster: each of its
# modules starts a cluster of its own whatever the run's Redis, so the first run has covered it.
PYTEST_CLUSTER_PATHS := tests/flusher tests/likes tests/live tests/messaging \
  tests/outbound/test_receipts_ingest.py tests/outbound/test_delivery_state.py \
  tests/gateway/test_presence.py tests/search
# Once is enough for these: the live accounting's negative control (it proves the accounting sees
# a gap), the kills through processes, which run a single Redis of their own, and the dead letter
# of an entry the flusher cannot convert (the database refuses it whatever the Redis topology),
# and the gateway's acceptance property (the same ingest path as ingest's own, which runs again);
# presence's cut subscription (it kills a single Redis's pub/sub clients).
PYTEST_CLUSTER_DESELECT := \
  --deselect tests/gateway/test_presence.py::test_a_subscription_redis_cut_comes_back_and_tells_what_changed_meanwhile \
  --deselect tests/live/test_accounting.py::test_resuming_without_the_position_is_caught_missing_messages \
  --deselect tests/live/test_kills.py::test_streams_resume_without_a_gap_through_killed_flusher_timeline_and_gateway \
  --deselect tests/live/test_feed_hub.py::test_watchers_coming_and_going_while_entries_come_miss_nothing \
  --deselect tests/messaging/test_unconvertible_entries.py::test_an_unconvertible_entry_is_dead_lettered_with_its_reason_and_the_shard_goes_on \
  --deselect tests/messaging/test_accepted_is_stored.py::test_every_message_the_gateway_accepts_is_stored_as_sent
PYTEST_CLUSTER_ARGS ?= -q $(wildcard $(PYTEST_CLUSTER_PATHS)) $(PYTEST_CLUSTER_DESELECT) --durations=10
# make test's third run, on the SQL datastores' HA engines (stack.sh run-ha): the suites whose
# writes a failover must keep (forum, likes, the flusher) and one failover of each engine under load.
PYTEST_HA_ARGS ?= -q tests/forum tests/likes tests/flusher tests/chaos/test_failover.py --durations=10
# The slowest tests named at the end of each run: where CI's 20 minutes go.
PYTEST_ARGS ?= --durations=25
# schemathesis examples per operation in make test's fuzzing of the gateway (make chaos: 20), and
# the tags of the operations it leaves out there (the event streams hold a request each until the
# fuzzer's timeout; make chaos fuzzes them).
FUZZ_MAX_EXAMPLES ?= 3
FUZZ_SKIP_TAGS ?= live
# Property examples per property in make test (make chaos: 20 each, their default), and on the
# cluster pass: the same properties checked again on the cluster's topology, fewer still.
PROPERTY_MAX_EXAMPLES ?= 10
CLUSTER_MAX_EXAMPLES ?= 4
N ?= 5

.PHONY: help setup protos up down logs token test lint k8s-validate bench bench-assignment capacity reindex dead-letters chaos traces backup restore

help:
	@echo "make up          install what is missing, start datastores + services, load demo data"
	@echo "                 REDIS=cluster: on a local Redis Cluster, 3 masters + 3 replicas on"
	@echo "                 127.0.0.1:17001-17006 (default REDIS=single: one Redis on :16379)"
	@echo "                 HA=1: PostgreSQL under Patroni with a synchronous standby, MariaDB on"
	@echo "                 Galera (2 nodes + garbd), HAProxy on :13306/:15432 (combines with REDIS)"
	@echo "make down        stop everything (make up TRACES=1 also runs a local trace sink)"
	@echo "make traces      the N most recent traces as waterfalls (N=5, TRACE=<id>)"
	@echo "make logs        follow every log"
	@echo "make token       print a dev bearer token (SUB=7 ACCOUNTS=1,2)"
	@echo "make test        lint, type-check, validate k8s, run every test against real servers,"
	@echo "                 then PYTEST_CLUSTER_ARGS against a test Redis Cluster (17101-17106), then"
	@echo "                 PYTEST_HA_ARGS on the HA engines (switched there and back: stack.sh run-ha)"
	@echo "make bench       benchmarks against the local stack (make up first)"
	@echo "make bench-assignment  the inbox filters' plans at 5M conversations (BENCH_ARGS=--rows N)"
	@echo "make stubs       the gRPC stubs as a wheel (packaging/stubs/dist; docs/grpc.md)"
	@echo "make proto-check buf lint, buf breaking against earlier protos, the VERSION rule"
	@echo "make chaos       every fault under load + the negative controls, then the HA engines' failovers;"
	@echo "                 updates docs/reliability.md; the full gateway fuzzing"
	@echo "make capacity    table sizes, bytes per row, 50M-row projection, growth per day"
	@echo "make reindex     rebuild the search index from MariaDB and PostgreSQL (REINDEX_ARGS=--accounts 1,2)"
	@echo "make dead-letters  list dead letters; REPLAY=<id> or REPLAY=all puts them back"
	@echo "make backup      Redis, MariaDB and PostgreSQL into var/backups/<UTC timestamp>/ (online)"
	@echo "make restore     BACKUP=var/backups/<timestamp>: replace the stack's data with a backup"

setup:
	@$(STACK) setup

protos:
	@$(STACK) setup

up:
	@TRACES=$(TRACES) REDIS=$(REDIS) HA=$(HA) $(STACK) up

down:
	@$(STACK) down

logs:
	@$(STACK) logs

token:
	@$(STACK) run $(PY) -m tools.jwt_token --sub $(SUB) --accounts="$(ACCOUNTS)"

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

k8s-validate: setup
	@$(STACK) run $(PY) -m tools.k8s_validate

test: lint proto-check
	@$(STACK) datastores
	@$(STACK) migrate agora_test
	@$(STACK) run env FUZZ_MAX_EXAMPLES=$(FUZZ_MAX_EXAMPLES) FUZZ_SKIP_TAGS=$(FUZZ_SKIP_TAGS) \
		HYPOTHESIS_MAX_EXAMPLES=$(PROPERTY_MAX_EXAMPLES) $(PY) -m pytest $(PYTEST_ARGS)
	@$(STACK) run-cluster env HYPOTHESIS_MAX_EXAMPLES=$(CLUSTER_MAX_EXAMPLES) $(PY) -m pytest $(PYTEST_CLUSTER_ARGS)
	@$(STACK) run-ha env HYPOTHESIS_MAX_EXAMPLES=$(CLUSTER_MAX_EXAMPLES) $(PY) -m pytest $(PYTEST_HA_ARGS)

bench:
	@$(PY) -m pip install -q --disable-pip-version-check -r requirements-bench.txt
	@$(STACK) run $(PY) -m bench $(BENCH_ARGS)

bench-assignment:
	@$(STACK) run $(PY) -m bench.assignment_filters $(BENCH_ARGS)

capacity:
	@$(STACK) run $(PY) -m tools.capacity

reindex:
	@$(STACK) run deploy/local/run-service.sh flusher $(PY) -m tools.reindex $(REINDEX_ARGS)

dead-letters:
	@$(STACK) run $(PY) -m tools.dead_letters --replay "$(REPLAY)"

chaos: setup
	@$(STACK) datastores
	@$(STACK) migrate agora_test
	@$(STACK) run $(PY) -m tests.chaos
	@$(STACK) run $(PY) -m pytest -q tests/gateway/test_hostile.py -k fuzzed_from_the_openapi
	@$(STACK) run $(PY) -m pytest -q tests/messaging/test_accepted_is_stored.py \
		tests/forum/test_accepted_is_stored.py tests/likes/test_accepted_is_stored.py
	@$(STACK) run-ha $(PY) -m tests.chaos --ha

traces:
	@$(PY) -m tools.traces -n $(N) $(if $(TRACE),--trace $(TRACE),)

backup:
	@$(STACK) run $(PY) -m tools.backup backup

restore:
	@test -n "$(BACKUP)" || { echo "usage: make restore BACKUP=var/backups/<timestamp>"; exit 2; }
	@$(STACK) run $(PY) -m tools.backup restore "$(BACKUP)"

# The gRPC contract for other teams (docs/grpc.md; tools/protos.py). buf is pinned in tools/buf
# (npm ci --prefix tools/buf, run by the tool when missing).
.PHONY: proto-check stubs

proto-check: setup
	@$(PY) -m tools.protos check

stubs: setup
	@$(PY) -m tools.protos stubs
