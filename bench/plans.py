"""A statement's plan as the bench reports it beside its latency: the index it reads by, whether
it sorts, and how many rows the optimizer expects to read (close to the LIMIT when the index
fits the query)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from services.runtime.mysql import MysqlDatabase


@dataclass(frozen=True)
class Plan:
    key: str  # the index the main table is read by
    sorts: bool  # a filesort anywhere in the plan
    estimated: int  # rows the optimizer expected to read (the index range, blind to LIMIT)
    read: int  # rows really read (ANALYZE runs the statement)


async def plan(db: MysqlDatabase, sql: str, args: tuple[Any, ...]) -> Plan:
    """The statement's plan and what it really read, from ANALYZE FORMAT=JSON (which runs it)."""
    row = await db.fetchone(f"ANALYZE FORMAT=JSON {sql}", args)
    text = str(row[0]) if row else "{}"
    tables: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "table_name" in node and "key" in node:
                tables.append(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(text))
    first = tables[0] if tables else {}
    if first.get("access_type") in ("const", "system"):
        # A unique-key lookup is read while optimizing, before the execution ANALYZE counts.
        first = {**first, "r_rows": first.get("rows"), "r_loops": 1}
    return Plan(
        key=str(first.get("key", "none")),
        sorts="filesort" in text,
        estimated=int(first.get("rows", 0)),
        # r_rows is per loop, and null for a table the execution never reached.
        read=round(float(first.get("r_rows") or 0) * float(first.get("r_loops") or 0)),
    )


def describe(found: Plan) -> str:
    sort = "FILESORT" if found.sorts else "no filesort"
    return (
        f"plan: index {found.key}, {sort}, {found.read:,} rows read"
        f" (optimizer's estimate {found.estimated:,})"
    )
