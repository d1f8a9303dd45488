"""The stand-in's flags, each with an environment variable as its default (supervisord and the
tests set those)."""

from __future__ import annotations

import argparse
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from tools.jwt_token import ROOT

DIE_POINTS = ("after-log", "after-echo", "any")


@dataclass(frozen=True)
class StandinConfig:
    target: str
    accounts: tuple[int, ...]
    listener_id: str
    log_path: Path
    # Seconds: from the send to the echo, and from the send to the delivered and seen receipts.
    echo_delay: float
    delivered_delay: float
    seen_delay: float
    # Each order fails with these probabilities instead of being sent.
    fail_retryable: float
    fail_permanent: float
    fail_rate_limited: float
    rate_limit_seconds: float
    # With this probability per send, os._exit at die_at (after-log: sent and logged, no echo
    # yet; after-echo: echoed, not reported; any: one of the two at random).
    die_probability: float
    die_at: str
    # The negative control: send again whatever possibly_sent says.
    ignore_possibly_sent: bool
    receipts: bool
    # On start, the echoes of what was sent this long ago or less are forwarded again.
    catch_up_seconds: float
    seed: int | None
    tls_dir: Path | None


def _env(name: str, default: str) -> str:
    return os.environ.get(f"LISTENER_STANDIN_{name}", default)


def _accounts(text: str) -> tuple[int, ...]:
    accounts = tuple(int(a) for a in text.replace(" ", "").split(",") if a)
    if not accounts:
        raise argparse.ArgumentTypeError("at least one account id")
    return accounts


def _probability(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text}: a probability is between 0 and 1")
    return value


def _default_target() -> str:
    port = os.environ.get("INGEST_PORT", "50051")
    return _env("TARGET", f"127.0.0.1:{port}")


def _default_log() -> str:
    var = Path(os.environ.get("AGORA_VAR") or ROOT / "var")
    return _env("LOG", str(var / "listener-standin" / "sent.jsonl"))


def parse(argv: list[str] | None = None) -> StandinConfig:
    parser = argparse.ArgumentParser(
        prog="python -m tools.listener_standin",
        description="A stand-in for the Zalo listener (development and tests only): takes the "
        "send orders of its accounts, 'sends' them into its sent log, forwards the echo, reports, "
        "and sends delivered and seen receipts later. Flags default to LISTENER_STANDIN_<FLAG>.",
    )
    add = parser.add_argument
    add("--target", default=_default_target(), help="ingest's API address (host:port)")
    add("--accounts", type=_accounts, default=_env("ACCOUNTS", "1,2"), help="e.g. 1,2")
    add("--listener-id", default=_env("ID", ""), help="default: standin-<host>-<pid>")
    add("--log", default=_default_log(), help="the sent log (JSON lines)")
    add("--echo-delay-ms", type=float, default=float(_env("ECHO_DELAY_MS", "150")))
    add("--delivered-delay-ms", type=float, default=float(_env("DELIVERED_DELAY_MS", "800")))
    add("--seen-delay-ms", type=float, default=float(_env("SEEN_DELAY_MS", "2500")))
    add("--fail-retryable", type=_probability, default=_env("FAIL_RETRYABLE", "0"))
    add("--fail-permanent", type=_probability, default=_env("FAIL_PERMANENT", "0"))
    add("--fail-rate-limited", type=_probability, default=_env("FAIL_RATE_LIMITED", "0"))
    add("--rate-limit-seconds", type=float, default=float(_env("RATE_LIMIT_SECONDS", "5")))
    add("--die-probability", type=_probability, default=_env("DIE_PROBABILITY", "0"))
    add("--die-at", choices=DIE_POINTS, default=_env("DIE_AT", "any"))
    add(
        "--ignore-possibly-sent",
        action="store_true",
        default=_env("IGNORE_POSSIBLY_SENT", "") == "1",
        help="NEGATIVE CONTROL: send an order offered as possibly sent again without checking",
    )
    add("--no-receipts", action="store_true", default=_env("RECEIPTS", "1") == "0")
    add(
        "--catch-up-seconds",
        type=float,
        default=float(_env("CATCH_UP_SECONDS", "600")),
        help="on start, forward again the echoes of the sends of this many seconds back",
    )
    add("--seed", type=int, default=int(_env("SEED", "0")) or None)
    add("--tls-dir", default=_env("TLS_DIR", ""), help="default: $AGORA_VAR/tls (var/tls)")
    args = parser.parse_args(argv)
    accounts = args.accounts if isinstance(args.accounts, tuple) else _accounts(args.accounts)
    return StandinConfig(
        target=args.target,
        accounts=accounts,
        listener_id=args.listener_id or f"standin-{socket.gethostname()}-{os.getpid()}",
        log_path=Path(args.log),
        echo_delay=args.echo_delay_ms / 1000,
        delivered_delay=args.delivered_delay_ms / 1000,
        seen_delay=args.seen_delay_ms / 1000,
        fail_retryable=float(args.fail_retryable),
        fail_permanent=float(args.fail_permanent),
        fail_rate_limited=float(args.fail_rate_limited),
        rate_limit_seconds=args.rate_limit_seconds,
        die_probability=float(args.die_probability),
        die_at=args.die_at,
        ignore_possibly_sent=args.ignore_possibly_sent,
        receipts=not args.no_receipts,
        catch_up_seconds=args.catch_up_seconds,
        seed=args.seed,
        tls_dir=Path(args.tls_dir) if args.tls_dir else None,
    )
