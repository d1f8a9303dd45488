"""The command line: `python -m tools.backup backup|restore`."""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis.asyncio as redis

from tools.backup.common import ROOT, CommandFailed, Config, Refused
from tools.backup.restoring import restore
from tools.backup.taking import backup

# --- command line ------------------------------------------------------------------------------


def _command(text: str) -> tuple[str, ...]:
    return tuple(shlex.split(text))


def _config(args: argparse.Namespace) -> Config:
    overrides: dict[str, Any] = {}
    for name in ("mysql_db", "pg_db", "redis_url"):
        if getattr(args, name, None):
            overrides[name] = getattr(args, name)
    if getattr(args, "redis_dir", None):
        overrides["redis_dir"] = Path(args.redis_dir)
    for name in ("redis_stop", "redis_start"):
        if getattr(args, name, None):
            overrides[name] = _command(getattr(args, name))
    if getattr(args, "no_services", False):
        overrides["services_stop"] = overrides["services_start"] = None
    return Config.from_env(**overrides)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Backup and restore of the local stack.")
    commands = parser.add_subparsers(dest="command", required=True)
    for sub in (
        commands.add_parser("backup", help="take a backup into DIR/<UTC timestamp>/"),
        commands.add_parser("restore", help="restore the backup in DIR"),
    ):
        sub.add_argument("--mysql-db", help="MariaDB database (default agora)")
        sub.add_argument("--pg-db", help="PostgreSQL database (default agora)")
        sub.add_argument("--redis-url", help="default: the stack's Redis, db 0")
    commands.choices["backup"].add_argument(
        "--dir", type=Path, default=Path(os.environ.get("AGORA_VAR", ROOT / "var")) / "backups"
    )
    rest = commands.choices["restore"]
    rest.add_argument("directory", type=Path)
    rest.add_argument("--redis-dir", help="the Redis server's directory when it is not running")
    rest.add_argument("--redis-stop", help="command that stops that Redis (stack.sh redis-stop)")
    rest.add_argument("--redis-start", help="command that starts it (stack.sh redis-start)")
    rest.add_argument(
        "--no-services", action="store_true", help="do not stop, start or wait for the services"
    )
    rest.add_argument(
        "--keep-liked-sets", action="store_true", help="do not drop the liked SETs after restoring"
    )
    args = parser.parse_args(argv)
    cfg = _config(args)
    t0 = time.monotonic()
    try:
        if args.command == "backup":
            directory = asyncio.run(backup(cfg, args.dir))
            print(f"backup written to {directory} in {time.monotonic() - t0:.1f}s")
            return 0
        report = asyncio.run(restore(cfg, args.directory, drop_liked=not args.keep_liked_sets))
    except Refused as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 2
    except (CommandFailed, RuntimeError, OSError, ValueError, redis.RedisError) as exc:
        print(f"{args.command} FAILED: {exc}", file=sys.stderr)
        return 1
    print(f"{time.monotonic() - t0:.1f}s in all")
    return 0 if report.ok else 1
