"""python -m tools.listener_standin: the listener stand-in (dev and tests only; docs/outbound.md)"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from tools.listener_standin.config import parse
from tools.listener_standin.standin import Standin


async def main() -> None:
    config = parse()
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s listener-standin: %(message)s",
    )
    logging.getLogger("listener_standin").info(
        "%s: accounts %s on %s, sent log %s%s",
        config.listener_id,
        ",".join(map(str, config.accounts)),
        config.target,
        config.log_path,
        " (NEGATIVE CONTROL: ignores possibly_sent)" if config.ignore_possibly_sent else "",
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await Standin(config).run(stop)


if __name__ == "__main__":
    asyncio.run(main())
