"""What a key family is: how its keys are spelled, and everything an operator must know of them.

A family's template names its parts in braces ("{prefix}:{{m{shard}}}:events"); a Redis hash
tag is written doubled ({{…}}), as in any format string. The same template gives a key
(`family.key(...)`), the ACL pattern of every key of the family (`family.pattern`: each part
a `*`, the prefix its default), and an example key for tests and capacity reports.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from enum import StrEnum

_FORMAT = string.Formatter()


class RedisType(StrEnum):
    STREAM = "stream"
    STRING = "string"
    HASH = "hash"
    SET = "set"
    ZSET = "zset"


@dataclass(frozen=True)
class Family:
    """One family of Redis keys.

    `access` maps each service that touches the family to the commands it runs on it (its code
    and its Lua scripts; `evalsha` where a script takes the family's keys): its Redis user is
    granted exactly those, on the family's pattern, and nothing else. `tag` says which slot
    the key must share and why; `ttl` and `bound` say how long a key lives and what caps the
    family's memory, and who enforces it (capacity reports read `bytes_each` and `count`).
    """

    id: str
    name: str
    template: str
    default_prefix: str
    type: RedisType
    owner: str
    access: dict[str, str]
    tag: str
    ttl: str
    bound: str
    # Rough bytes per key as Redis holds it, and how many keys a deployment has, by the sizing
    # the capacity report uses (a sentence, read by people; the report computes from `per`).
    bytes_each: int = 0
    per: str = ""
    example_parts: dict[str, object] = field(default_factory=dict)

    def key(self, prefix: str | None = None, /, **parts: object) -> str:
        return self.template.format(
            prefix=self.default_prefix if prefix is None else prefix, **parts
        )

    def parts(self) -> list[str]:
        return [name for _, name, _, _ in _FORMAT.parse(self.template) if name and name != "prefix"]

    def glob(self, prefix: str | None = None) -> str:
        """Every key of the family as a glob (SCAN MATCH, ACL key patterns: `*` any text)."""
        return self.key(prefix, **dict.fromkeys(self.parts(), "*"))

    @property
    def pattern(self) -> str:
        """The family's ACL key pattern (`{` is no special character to the ACL)."""
        return self.glob()

    @property
    def example(self) -> str:
        return self.key(None, **{part: self.example_parts.get(part, 7) for part in self.parts()})

    def commands(self, service: str) -> list[str]:
        return self.access.get(service, "").split()

    def access_commands(self) -> set[str]:
        """Every command some service runs on the family."""
        return {command for service in self.access for command in self.commands(service)}


@dataclass(frozen=True)
class Channel:
    """One family of pub/sub channels, declared as key families are: `access` maps each service
    to the pub/sub commands it runs on the family's channels, granted on its pattern only."""

    id: str
    name: str
    template: str
    default_prefix: str
    tag: str
    bound: str
    access: dict[str, str]

    def channel(self, prefix: str | None = None, /, **parts: object) -> str:
        return self.template.format(
            prefix=self.default_prefix if prefix is None else prefix, **parts
        )

    def parts(self) -> list[str]:
        return [name for _, name, _, _ in _FORMAT.parse(self.template) if name and name != "prefix"]

    @property
    def pattern(self) -> str:
        """Every channel of the family as an ACL channel pattern (`*` any text)."""
        return self.channel(None, **dict.fromkeys(self.parts(), "*"))

    @property
    def example(self) -> str:
        return self.channel(None, **dict.fromkeys(self.parts(), 7))

    def commands(self, service: str) -> list[str]:
        return self.access.get(service, "").split()
