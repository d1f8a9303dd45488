"""The keyspace is the one place a Redis key is spelled (services/keyspace): its families do not
overlap, each names its owner and a bound the capacity report can size, every command it grants
can be tried by the ACL tests, and no other module, test or Lua script spells a key prefix."""

from __future__ import annotations

import re
import subprocess

from services import keyspace
from tests.deploy.redis_acl_support import SHAPES
from tests.helpers import ROOT
from tools import keyspace_doc

# A string literal that begins with a family's prefix and goes on as a key would.
_PREFIXES = sorted({family.default_prefix for family in keyspace.FAMILIES})
_SPELLED = re.compile(
    r"""["'](?:"""
    + "|".join(re.escape(p) + (r"(?:[\"':])" if ":" in p else r":[^\s\"']") for p in _PREFIXES)
    + ")"
)


def test_every_key_belongs_to_exactly_one_family() -> None:
    for family in keyspace.FAMILIES:
        owners = [f.name for f in keyspace.FAMILIES if keyspace.family_of(family.example) is f]
        assert keyspace.family_of(family.example) is family, (family.name, owners)


def test_every_family_names_its_owner_its_users_and_its_bound() -> None:
    for family in keyspace.FAMILIES:
        assert family.owner in keyspace.SERVICES, family.name
        assert set(family.access) <= set(keyspace.SERVICES), family.name
        assert all((family.ttl, family.bound, family.tag)), family.name
        assert family.per in keyspace.DESIGN_SCALE, (family.name, family.per)
        assert family.bytes_each > 0, family.name


def test_every_granted_command_can_be_tried() -> None:
    granted = {c for family in keyspace.FAMILIES for c in family.access_commands()}
    assert granted <= set(SHAPES), granted - set(SHAPES)


def test_no_module_but_the_keyspace_spells_a_key() -> None:
    files = subprocess.run(
        ["git", "ls-files", "services", "tools", "bench", "tests", "*.lua"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    spelled = [
        f"{name}:{n}: {line.strip()}"
        for name in files
        if name.endswith((".py", ".lua")) and not name.startswith("services/keyspace/")
        for n, line in enumerate((ROOT / name).read_text().splitlines(), 1)
        if _SPELLED.search(line)
    ]
    assert not spelled, "\n".join(spelled)


def test_the_architecture_document_shows_the_keyspace_as_declared() -> None:
    document = keyspace_doc.DOC.read_text()
    assert keyspace_doc.rendered(document) == document, "run: python -m tools.keyspace_doc --write"


def test_the_keys_derived_from_a_key_are_its_declared_families() -> None:
    """A feed's side keys and a stream's failure counts are built from the feed's or the stream's
    own name: the suffixes must give exactly the declared families."""
    for kind, part in (("inbox", {"account": 7}), ("course", {"course": 7})):
        feed = keyspace.family(f"live.{kind}").key(**part)
        side = ("meta", "versions", "versions_at")
        declared = [keyspace.family(f"live.{kind}_{name}").key(**part) for name in side]
        assert keyspace.feed_keys(feed) == [feed, *declared]
    for group in ("messages", "likes"):
        stream = keyspace.family(f"{group}.events").key(shard=3)
        failures = keyspace.family(f"{group}.failures").key(shard=3)
        assert keyspace.failures_beside(stream) == failures
