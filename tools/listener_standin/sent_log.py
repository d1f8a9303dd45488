"""The stand-in's sent log: one JSON line per message it "sent", fsynced before anything else
happens. It is Zalo's truth in the tests (a cli_msg_id on two lines was sent twice) and the
listener's own record of what it sent, which it reads when an order comes back `possibly_sent`.

Several stand-in processes may append to one log (O_APPEND, one write(2) per line), so a lookup
reads what others appended since the last one.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class SentRecord:
    cli_msg_id: str
    msg_id: str
    account_id: int
    conversation_key: str
    epoch: int
    # When it was sent (UTC, ISO 8601 with milliseconds): the sent_at of the echo and the report.
    at: str
    # What was sent: what Zalo echoes again when the stand-in comes back (catch_up).
    content: str = ""
    quote_msg_id: str = ""
    attachments: str = ""


class SentLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._first: dict[tuple[int, str], SentRecord] = {}
        self._read_up_to = 0
        self.refresh()

    def refresh(self) -> None:
        """Take in the lines appended since the last read (by this process or another)."""
        with self.path.open("rb") as log:
            log.seek(self._read_up_to)
            data = log.read()
        # Only whole lines: another process's line may be half-way through its write.
        end = data.rfind(b"\n") + 1
        for line in data[:end].splitlines():
            record = parse(line)
            if record is not None:
                self._first.setdefault((record.account_id, record.cli_msg_id), record)
        self._read_up_to += end

    def find(self, account_id: int, cli_msg_id: str) -> SentRecord | None:
        """The first send of this order on record, reading the log afresh."""
        self.refresh()
        return self._first.get((account_id, cli_msg_id))

    def append(self, record: SentRecord) -> None:
        """Record a send, durably (fsync) before returning: blocking on purpose, so that nothing
        else of this process runs between the check of the log and the send it records."""
        line = json.dumps(asdict(record), separators=(",", ":")) + "\n"
        os.write(self._fd, line.encode())
        os.fsync(self._fd)
        self._first.setdefault((record.account_id, record.cli_msg_id), record)

    def since(self, accounts: tuple[int, ...], at: str) -> list[SentRecord]:
        """The first send of each order of these accounts at `at` or later (ISO 8601 UTC)."""
        self.refresh()
        return [r for r in self._first.values() if r.account_id in accounts and r.at >= at]

    def close(self) -> None:
        os.close(self._fd)


def parse(line: bytes) -> SentRecord | None:
    try:
        fields = json.loads(line)
        return SentRecord(**fields)
    except (ValueError, TypeError):
        return None


def read(path: Path) -> list[SentRecord]:
    """Every whole line of a sent log, in the order they were written (the accounting's view)."""
    if not path.exists():
        return []
    records = []
    for line in path.read_bytes().splitlines():
        record = parse(line)
        if record is not None:
            records.append(record)
    return records
