"""`make traces [N=5] [TRACE=<id>]`: the most recent traces as readable waterfalls.

In a browser: the trace sink serves the same traces on http://127.0.0.1:16686/ (tools/trace_view).

Each line: offset from the trace start, the span tree, service, span name, duration, kind and the
attributes that say what happened (HTTP route and status, RPC, messaging destination, DB statement).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

KINDS = {1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
SHOWN = (
    "http.route",
    "http.response.status_code",
    "http.status_code",
    "rpc.method",
    "rpc.grpc.status_code",
    "messaging.destination.name",
    "messaging.batch.message_count",
    "db.system.name",
    "db.system",
    "db.operation.name",
    "db.collection.name",
    "db.operation.batch.size",
    "db.statement",
    "agora.prune.deleted",
)


@dataclass
class Span:
    span_id: str
    parent_id: str | None
    service: str
    name: str
    kind: int
    start: int
    end: int
    status: int
    attributes: dict[str, object]
    links: int


def load(db: sqlite3.Connection, trace_id: str) -> list[Span]:
    rows = db.execute(
        "SELECT span_id, parent_id, service, name, kind, start_ns, end_ns, status, attributes,"
        " links FROM spans WHERE trace_id = ? ORDER BY start_ns",
        (trace_id,),
    ).fetchall()
    return [
        Span(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], json.loads(r[8]), r[9]) for r in rows
    ]


def waterfall(trace_id: str, spans: list[Span]) -> str:
    ids = {s.span_id for s in spans}
    children: dict[str | None, list[Span]] = {}
    for span in spans:
        parent = span.parent_id if span.parent_id in ids else None
        children.setdefault(parent, []).append(span)
    t0 = min(s.start for s in spans)
    total = (max(s.end for s in spans) - t0) / 1e6
    lines = [f"trace {trace_id}  {len(spans)} spans, {total:.1f} ms"]

    def walk(parent: str | None, prefix: str) -> None:
        kids = sorted(children.get(parent, []), key=lambda s: s.start)
        for i, span in enumerate(kids):
            last = i == len(kids) - 1
            attrs = " ".join(
                f"{k}={str(span.attributes[k])[:60]!s}" for k in SHOWN if k in span.attributes
            )
            status = " ERROR" if span.status == 2 else ""
            links = f" links={span.links}" if span.links else ""
            lines.append(
                f"{(span.start - t0) / 1e6:8.2f} ms {prefix}{'└─' if last else '├─'} "
                f"{span.service:<9} {span.name}  {(span.end - span.start) / 1e6:.2f} ms"
                f" [{KINDS.get(span.kind, '?')}{status}]{links} {attrs}".rstrip()
            )
            walk(span.span_id, prefix + ("   " if last else "│  "))

    walk(None, "")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=5)
    parser.add_argument("--trace", default="")
    parser.add_argument("--db", type=Path, default=Path("var/traces.sqlite"))
    args = parser.parse_args()
    if not args.db.exists():
        raise SystemExit("no traces yet: run `make up TRACES=1`, make a few requests, try again")
    db = sqlite3.connect(args.db)
    if args.trace:
        traces = [args.trace]
    else:
        traces = [
            r[0]
            for r in db.execute(
                "SELECT trace_id FROM spans WHERE parent_id IS NULL GROUP BY trace_id"
                " ORDER BY max(start_ns) DESC LIMIT ?",
                (args.n,),
            )
        ]
    for trace_id in traces:
        spans = load(db, trace_id)
        if not spans:
            raise SystemExit(f"no trace {trace_id} in {args.db}")
        print(waterfall(trace_id, spans))
        print()
    print("in a browser: http://127.0.0.1:16686/ (the trace sink's view, `make up TRACES=1`)")


if __name__ == "__main__":
    main()
