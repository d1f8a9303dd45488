"""The inbox's assignee and status filters at --assignment-rows conversations: each shape's plan
(its own index, no filesort, about a page of rows read) and its latency, first and next page
(bench/assignment_filters.py, which also runs alone). A plan that is not one indexed range
fails the section."""

from __future__ import annotations

from bench import progress
from bench.assignment_filters import SECTION, run
from bench.common import Result, Stack
from bench.plans import describe
from bench.sections.options import Options


async def assignment_section(stack: Stack, o: Options) -> list[Result]:
    samples = max(100, o.samples // 10)
    text, measured = await run(stack, o.assignment_rows, o.assignment_accounts, samples)
    progress.say(SECTION, "\n" + text)
    results = []
    for m in measured:
        slug = f"{m.shape.name.replace(' ', '.').replace('=', '_')}.{m.page}"
        results.append(
            Result(
                f"assignment.{slug}_p50_ms",
                "assignment",
                f"inbox {m.shape.name}, {m.page} page p50",
                m.p50_ms,
                "ms",
                describe(m.plan),
            )
        )
    failed = [f"{m.shape.name} {m.page}: {'; '.join(m.problems)}" for m in measured if m.problems]
    if failed:
        raise SystemExit("not one indexed range: " + ", ".join(failed))
    return results
