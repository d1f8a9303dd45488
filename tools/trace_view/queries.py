"""What the browser view shows, read from the sink's database (tools/trace_sink.py's schema)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

STATUS = {0: "unset", 1: "ok", 2: "error"}
KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
MAX_LIMIT = 500


def services(db: sqlite3.Connection) -> list[str]:
    """Every service with a span in the database, sorted: the view colors them in this order."""
    return [r[0] for r in db.execute("SELECT DISTINCT service FROM spans ORDER BY service")]


def recent_traces(db: sqlite3.Connection, limit: int = 50, service: str = "") -> dict[str, Any]:
    """The most recent traces (by their latest span), newest first, optionally touching a service.

    Each: its root span's name and service (the span without a parent; if the root has not
    arrived, the earliest span), start, duration, span count, error count, and whether the root
    is there.
    """
    limit = max(1, min(limit, MAX_LIMIT))
    where = ""
    params: tuple[object, ...] = ()
    if service:
        where = "WHERE trace_id IN (SELECT trace_id FROM spans WHERE service = ?)"
        params = (service,)
    rows = db.execute(
        "SELECT trace_id, min(start_ns), max(end_ns), count(*), sum(status = 2),"
        f" sum(parent_id IS NULL) FROM spans {where}"
        " GROUP BY trace_id ORDER BY max(start_ns) DESC LIMIT ?",
        (*params, limit),
    ).fetchall()
    result = []
    for trace_id, start, end, count, errors, roots in rows:
        root = db.execute(
            "SELECT name, service FROM spans WHERE trace_id = ?"
            " ORDER BY parent_id IS NOT NULL, start_ns LIMIT 1",
            (trace_id,),
        ).fetchone()
        touched = [
            r[0]
            for r in db.execute(
                "SELECT DISTINCT service FROM spans WHERE trace_id = ? ORDER BY service",
                (trace_id,),
            )
        ]
        result.append(
            {
                "trace_id": trace_id,
                "root_name": root[0],
                "root_service": root[1],
                "services": touched,
                "start_unix_ms": start / 1e6,
                "duration_ms": (end - start) / 1e6,
                "span_count": count,
                "error_count": errors,
                "has_root": roots > 0,
            }
        )
    return {"traces": result, "services": services(db)}


def trace_detail(db: sqlite3.Connection, trace_id: str) -> dict[str, Any] | None:
    """One trace: its spans depth-first (siblings by start), each with depth, offset, duration,
    attributes and events; a span whose parent never arrived is shown as a root (`orphan`)."""
    rows = db.execute(
        "SELECT span_id, parent_id, service, name, kind, start_ns, end_ns, status, attributes,"
        " links, status_message, events FROM spans WHERE trace_id = ? ORDER BY start_ns, span_id",
        (trace_id,),
    ).fetchall()
    if not rows:
        return None
    ids = {r[0] for r in rows}
    children: dict[str | None, list[tuple[Any, ...]]] = {}
    for row in rows:
        parent = row[1] if row[1] in ids else None
        children.setdefault(parent, []).append(row)
    t0 = min(r[5] for r in rows)
    t1 = max(r[6] for r in rows)
    spans: list[dict[str, Any]] = []
    # Depth-first without recursion; spans in a parent cycle (never reached from a root) come
    # last, as roots.
    stack = [(row, 0) for row in reversed(children.get(None, []))]
    seen: set[str] = set()
    while stack or len(seen) < len(rows):
        if not stack:
            stack = [(next(r for r in rows if r[0] not in seen), 0)]
        row, depth = stack.pop()
        seen.add(row[0])
        spans.append(_span(row, depth, t0))
        stack.extend(
            (child, depth + 1)
            for child in reversed(children.get(row[0], []))
            if child[0] not in seen
        )
    return {
        "trace_id": trace_id,
        "start_unix_ms": t0 / 1e6,
        "duration_ms": (t1 - t0) / 1e6,
        "span_count": len(spans),
        "error_count": sum(1 for s in spans if s["status"] == "error"),
        "services": services(db),
        "spans": spans,
    }


def _span(row: tuple[Any, ...], depth: int, t0: int) -> dict[str, Any]:
    (span_id, parent_id, service, name, kind, start, end, status, attributes, links) = row[:10]
    return {
        "span_id": span_id,
        "parent_id": parent_id,
        # A root with a parent id: its parent never arrived (or the ids form a cycle).
        "orphan": parent_id is not None and depth == 0,
        "depth": depth,
        "service": service,
        "name": name,
        "kind": KINDS.get(kind, str(kind)),
        "start_unix_nano": str(start),
        "offset_ms": (start - t0) / 1e6,
        "duration_ms": (end - start) / 1e6,
        "status": STATUS.get(status, str(status)),
        "status_message": row[10],
        "attributes": json.loads(attributes),
        "links": links,
        "events": [
            {
                "name": e["name"],
                "offset_ms": (int(e["time_ns"]) - t0) / 1e6,
                "attributes": e["attributes"],
            }
            for e in json.loads(row[11])
        ],
    }
