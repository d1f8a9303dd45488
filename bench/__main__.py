"""make bench: measure the local stack against baselines taken in the same run.

  python -m bench [--rows 1000000] [--only timeline,forum] [--skip cluster] [--scaling] ...

Sections: ingest, prune, timeline, forum, likes, gateway, live, outbound, assignment, cluster,
search, statements (all by default; assignment: the inbox's assignee and status filters' plans and
latencies at --assignment-rows conversations, bench/assignment_filters.py; statements:
PostgreSQL's hot statements of the run, from pg_stat_statements) and,
opt-in, scaling (--scaling: the timeline at --rows and --scaling-rows, 16/64/256 callers, PNG
plots). outbound: replies through a listener stand-in of the bench's own (bench/outbound.py).
cluster: ingest and buffered likes on one Redis vs a local Redis Cluster started for the run
(WAIT 1 and WAIT 0), the same processes on both (bench/cluster.py). search: the search route
against the bare engine query at --search-documents indexed messages, the indexing lag at
--search-lag-rate msg/s, ingest end to end with the flusher's indexer on vs off
(bench/sections/search.py).

Progress goes to stderr; at the end the table, the targets (docs/design.md) and a comparison with
the previous run are printed and written to bench/results/<date>.md and bench/results/latest.json
(a run of some sections only: bench/results/<date>-only-<sections>.md and .json, so that latest.json
stays the last complete run).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import shlex
import sys
import time
import traceback
import warnings
from pathlib import Path

from bench import pg_statements, progress, report
from bench.common import Result, Stack
from bench.sections import (
    Options,
    assignment_section,
    cluster_section,
    forum_section,
    gateway_section,
    ingest_section,
    likes_section,
    live_section,
    outbound_section,
    prepare_data_set,
    prune_section,
    scaling_section,
    search_section,
    timeline_section,
)
from bench.timeline_latency import TimelineRun

RESULTS = Path(__file__).parent / "results"
SECTIONS = (
    "ingest",
    "prune",
    "timeline",
    "forum",
    "likes",
    "gateway",
    "live",
    "outbound",
    "assignment",
    "cluster",
    "search",
    "statements",
)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rows", type=int, default=1_000_000, help="timeline data set size")
    parser.add_argument("--ingest-messages", type=int, default=200_000)
    parser.add_argument(
        "--assignment-rows", type=int, default=5_000_000, help="conversations of the filters' run"
    )
    parser.add_argument(
        "--search-documents", type=int, default=5_000_000, help="search: documents in the index"
    )
    parser.add_argument(
        "--search-queried-messages",
        type=int,
        default=3000,
        help="search: messages of each of the 20 queried accounts (in MariaDB and the index)",
    )
    parser.add_argument(
        "--search-rounds", type=int, default=3, help="search: rounds of each measure (median)"
    )
    parser.add_argument(
        "--search-lag-rate", type=float, default=800.0, help="search: msg/s of the lag runs"
    )
    parser.add_argument(
        "--search-lag-seconds", type=float, default=30.0, help="search: seconds a lag run sends"
    )
    parser.add_argument(
        "--search-ingest-messages",
        type=int,
        default=100_000,
        help="search: messages of each ingest round, indexer off and on",
    )
    parser.add_argument("--prune-messages", type=int, default=200_000)
    parser.add_argument(
        "--prune-rounds", type=int, default=3, help="alternating off/on rounds (median taken)"
    )
    parser.add_argument(
        "--only", default=",".join(SECTIONS), help=f"sections to run, of {','.join(SECTIONS)}"
    )
    parser.add_argument(
        "--skip", default="", help="sections not to run, of those --only names (e.g. cluster)"
    )
    parser.add_argument(
        "--samples", type=int, default=2000, help="sequential calls per latency measure"
    )
    parser.add_argument("--warmup", type=int, default=200, help="calls not kept, before those")
    parser.add_argument(
        "--likes-open-seconds",
        type=float,
        default=30.0,
        help="open-loop likes run per mode (seconds)",
    )
    parser.add_argument(
        "--cluster-rounds",
        type=int,
        default=3,
        help="cluster: interleaved rounds of ingest (--ingest-messages) and likes per setup",
    )
    parser.add_argument(
        "--wrk-seconds", type=float, default=10.0, help="wrk run per connection count"
    )
    parser.add_argument(
        "--scaling",
        action="store_true",
        help="also the timeline at --scaling-rows and under 16/64/256 callers, with plots",
    )
    parser.add_argument(
        "--scaling-rows",
        default="5000000",
        help="the other sizes of the scaling run, comma-separated (beside --rows)",
    )
    parser.add_argument("--scaling-concurrency", default="16,64,256")
    parser.add_argument(
        "--scaling-seconds", type=float, default=10.0, help="closed-loop run per concurrency"
    )
    parser.add_argument(
        "--keep-rows",
        action="store_true",
        help="leave the data set at --scaling-rows after --scaling (default: back to --rows)",
    )
    args = parser.parse_args(argv)
    for option in ("only", "skip"):
        named = {s for s in getattr(args, option).split(",") if s}
        unknown = named - set(SECTIONS) - {"scaling"}
        if unknown:
            parser.error(f"--{option}: unknown section(s) {', '.join(sorted(unknown))}")
    scaling = args.scaling or "scaling" in args.only.split(",")
    if scaling and importlib.util.find_spec("matplotlib") is None:
        parser.error("--scaling draws plots: .venv/bin/pip install -r requirements-bench.txt")
    return args


async def run(args: argparse.Namespace, command: str) -> int:
    started = time.time()
    options = Options(
        rows=args.rows,
        ingest_messages=args.ingest_messages,
        prune_messages=args.prune_messages,
        prune_rounds=args.prune_rounds,
        samples=args.samples,
        warmup=args.warmup,
        likes_open_seconds=args.likes_open_seconds,
        wrk_seconds=args.wrk_seconds,
        scaling_rows=[int(r) for r in args.scaling_rows.split(",")],
        scaling_concurrency=[int(c) for c in args.scaling_concurrency.split(",")],
        scaling_seconds=args.scaling_seconds,
        keep_rows=args.keep_rows,
        cluster_rounds=args.cluster_rounds,
        assignment_rows=args.assignment_rows,
        search_documents=args.search_documents,
        search_queried_messages=args.search_queried_messages,
        search_rounds=args.search_rounds,
        search_lag_rate=args.search_lag_rate,
        search_lag_seconds=args.search_lag_seconds,
        search_ingest_messages=args.search_ingest_messages,
    )
    stack = Stack.from_env()
    wanted = set(args.only.split(","))
    if args.scaling:
        wanted.add("scaling")
    wanted -= set(args.skip.split(","))
    # Read before this run overwrites it.
    previous = report.load_previous(RESULTS / "latest.json")
    results: list[Result] = []
    failures: list[str] = []
    known: dict[int, TimelineRun] = {}
    counting = "statements" in wanted and await pg_statements.reset(stack)
    if "statements" in wanted and not counting:
        failures.append("statements: pg_stat_statements is not installed (stack.sh datastores)")

    async def timeline() -> list[Result]:
        rows, measured = await timeline_section(stack, options)
        known[options.rows] = measured
        return rows

    plans = [
        ("ingest", lambda: ingest_section(stack, options)),
        ("prune", lambda: prune_section(stack, options)),
        ("timeline", timeline),
        ("forum", lambda: forum_section(stack, options)),
        ("likes", lambda: likes_section(stack, options)),
        ("gateway", lambda: gateway_section(stack, options)),
        ("live", lambda: live_section(stack, options)),
        ("outbound", lambda: outbound_section(stack, options)),
        ("assignment", lambda: assignment_section(stack, options)),
        ("cluster", lambda: cluster_section(stack, options)),
        ("search", lambda: search_section(stack, options)),
        ("scaling", lambda: scaling_section(stack, options, known, RESULTS)),
        # Last: what the sections before asked of PostgreSQL.
        ("statements", lambda: pg_statements.hot_statements(stack)),
    ]
    if wanted & {"ingest", "prune", "timeline"}:
        # The table at its size first: ingest and prune write into it, the timeline reads it.
        with progress.section("dataset"):
            await prepare_data_set(stack, options)
    for name, plan in plans:
        if name not in wanted or (name == "statements" and not counting):
            continue
        try:
            with progress.section(name):
                results += await plan()
        except (Exception, SystemExit) as exc:  # one section failing must not lose the others
            traceback.print_exc(file=sys.stderr)
            failures.append(f"{name}: {type(exc).__name__}: {exc}")

    plots = [p.name for p in sorted(RESULTS.glob("scaling-*.png"))] if "scaling" in wanted else []
    checks = report.target_checks(results)
    compared = report.comparison(results, previous)
    text = report.markdown(results, command, checks, compared, failures, plots)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    # latest.json is the last run of every section (what the README's table is read from); a run
    # of a few sections is kept beside it, named by them, and never replaces it.
    day = time.strftime("%Y-%m-%d")
    missing = set(SECTIONS) - wanted
    stem = f"{day}-only-{'-'.join(n for n in SECTIONS if n in wanted)}" if missing else day
    json_path = RESULTS / (f"{stem}.json" if missing else "latest.json")
    (RESULTS / f"{stem}.md").write_text(text)
    report.write_json(json_path, results, command, started, failures)
    progress.say("bench", f"wrote {json_path} and {RESULTS / f'{stem}.md'}")
    return 1 if failures else 0


def main() -> None:
    # MariaDB's notes on INSERT IGNORE of rows that exist and CREATE TABLE IF NOT EXISTS of
    # tables that do (the data sets are loaded once), which aiomysql turns into warnings.
    for note in ("Duplicate entry", "Table .* already exists"):
        warnings.filterwarnings("ignore", message=note, module="aiomysql")
    argv = sys.argv[1:]
    args = parse_args(argv)
    command = " ".join(["python -m bench", shlex.join(argv)]).strip()
    sys.exit(asyncio.run(run(args, command)))


main()
