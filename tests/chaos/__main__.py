"""make chaos: every fault under load, then the negative controls; refreshes docs/reliability.md.

python -m tests.chaos [--ha] [--quick] [--only NAME ...]

--ha runs the failovers of the SQL datastores' HA engines instead (the stack on `HA=1`:
`stack.sh run-ha` switches it there and back) and refreshes their own table. --only runs just the
named faults or negative controls (the names in the table) and leaves the docs alone, like --quick.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
import traceback
from pathlib import Path

from tests.chaos.harness.faults import FAULTS, QUICK
from tests.chaos.harness.run import (
    CONTROLS,
    HA_CONTROLS,
    QUICK_CONTROLS,
    Outcome,
    describe,
    run_scenario,
    table,
)
from tests.chaos.harness.sql_failover import FAILOVERS, QUICK_FAILOVERS

REPORT = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"
MARKERS = {False: "chaos", True: "chaos-ha"}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="the faults make test runs")
    parser.add_argument(
        "--ha", action="store_true", help="the HA engines' failovers (the stack on HA=1)"
    )
    parser.add_argument(
        "--only",
        action="append",
        metavar="NAME",
        choices=[*FAULTS, *FAILOVERS, *CONTROLS],
        help="run only this fault or negative control (repeatable); docs are not touched",
    )
    args = parser.parse_args()
    if args.only:
        names = list(args.only)
    elif args.ha:
        names = [*QUICK_FAILOVERS] if args.quick else [*FAILOVERS, *HA_CONTROLS]
    elif args.quick:
        names = [*QUICK, *QUICK_CONTROLS]
    else:
        names = [*FAULTS, *(c for c in CONTROLS if c not in HA_CONTROLS)]
    outcomes: list[Outcome] = []
    broken: list[str] = []
    for name in names:
        print(f"--> {name}", flush=True)
        try:
            outcome = await run_scenario(name)
        except Exception:
            # The harness itself failed (a fault could not be injected or healed): say so, and
            # go on with the other scenarios.
            traceback.print_exc()
            broken.append(name)
            continue
        outcomes.append(outcome)
        print(table([outcome]).splitlines()[-1], flush=True)
    text = table(outcomes)
    print(text)
    for outcome in outcomes:
        print(describe(outcome))
    failed = [o.fault for o in outcomes if not o.control and not o.clean]
    undetected = [o.fault for o in outcomes if o.control and not CONTROLS[o.fault].detects(o)]
    for name in undetected:
        print(f"negative control DID NOT detect anything: {name}")
    for name in broken:
        print(f"harness error (no outcome): {name}")
    if not args.only and not args.quick and REPORT.exists() and not broken:
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        begin, end = (f"<!-- {MARKERS[args.ha]}:{edge} -->" for edge in ("begin", "end"))
        body = f"{begin}\nLast run: {stamp}, `make chaos`.\n\n{text}\n{end}"
        REPORT.write_text(re.sub(f"{begin}.*{end}", body, REPORT.read_text(), flags=re.S))
    if failed or undetected or broken:
        sys.exit(1)


if __name__ == "__main__":
    asyncio.run(main())
