"""`python -m tools.keyspace_doc`: the keyspace table of docs/architecture.md, from
services/keyspace (`--write` puts it between the document's keyspace markers; a test keeps the
two equal)."""

from __future__ import annotations

import sys
from pathlib import Path

from services import keyspace

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
BEGIN, END = "<!-- keyspace:begin -->", "<!-- keyspace:end -->"


def table() -> str:
    rows = [
        "| family | key | type | owner | others (commands) | TTL | bound |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in keyspace.FAMILIES:
        others = "; ".join(
            f"{service}: {' '.join(c for c in f.commands(service) if c != 'evalsha') or 'scripts'}"
            for service in f.access
            if service != f.owner
        )
        cells = [f.name, f"`{f.pattern}`", f.type, f.owner, others or "–", f.ttl, f.bound]
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    rows += [
        "",
        "| pub/sub channel | channel | tag | services (commands) | bound |",
        "|---|---|---|---|---|",
    ]
    for c in keyspace.CHANNELS:
        services = "; ".join(f"{s}: {' '.join(c.commands(s))}" for s in c.access)
        cells = [c.name, f"`{c.pattern}`", c.tag, services, c.bound]
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(rows) + "\n"


def rendered(document: str) -> str:
    head, rest = document.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table()}{END}{tail}"


def main(argv: list[str]) -> int:
    if argv == ["--write"]:
        DOC.write_text(rendered(DOC.read_text()))
        return 0
    sys.stdout.write(table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
