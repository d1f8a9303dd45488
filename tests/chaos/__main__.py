"""make chaos: every fault under load, then the negative control; refreshes docs/reliability.md.

python -m tests.chaos [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from pathlib import Path

from tests.chaos.faults import FAULTS, QUICK
from tests.chaos.run import Outcome, run_scenario, table

REPORT = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"
BEGIN, END = "<!-- chaos:begin -->", "<!-- chaos:end -->"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="the faults make test runs")
    args = parser.parse_args()
    names = QUICK if args.quick else tuple(FAULTS)
    outcomes: list[Outcome] = []
    for name in names:
        print(f"--> {name}", flush=True)
        outcomes.append(await run_scenario(name))
    print("--> negative control: kill -9 Redis with AOF off", flush=True)
    control = await run_scenario("kill -9 Redis + restart (AOF, fsync always)", aof=False)
    text = table([*outcomes, control])
    print(text)
    detected = control.lost > 0 or control.likes_lost > 0
    print(f"negative control {'detected the loss' if detected else 'DID NOT detect any loss'}")
    if not args.quick and REPORT.exists():
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        body = f"{BEGIN}\nLast run: {stamp}, `make chaos`.\n\n{text}\n{END}"
        REPORT.write_text(re.sub(f"{BEGIN}.*{END}", body, REPORT.read_text(), flags=re.S))
    if not all(o.clean for o in outcomes) or not detected:
        sys.exit(1)


if __name__ == "__main__":
    asyncio.run(main())
