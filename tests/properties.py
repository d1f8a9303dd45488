"""What the property tests share: their Hypothesis settings and the text every store must take.

The properties run against the real services and datastores, so examples are few and slow-ish:
no deadline, a modest count (HYPOTHESIS_MAX_EXAMPLES overrides it). Under CI (CI=true) they are
derandomized, so a run is reproducible from the code alone, and keep no example database; on a
developer's machine they explore at random and remember failing examples in .hypothesis/, so a
failure found once is replayed first next time.
"""

from __future__ import annotations

import os
from pathlib import Path

import grpc
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

_CI = os.environ.get("CI", "").lower() == "true"
_ROOT = Path(__file__).resolve().parents[1]

# Function-scoped fixtures (empty tables, a flusher) are set up once per test, not per example:
# each example works on rows of its own (a fresh account, post or user), so that is what we want.
PROPERTY = settings(
    max_examples=int(os.environ.get("HYPOTHESIS_MAX_EXAMPLES", "20")),
    deadline=None,
    derandomize=_CI,
    database=None if _CI else DirectoryBasedExampleDatabase(_ROOT / ".hypothesis" / "examples"),
    print_blob=True,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)

# Any Unicode scalar value except NUL (which the services refuse) and the surrogates (which UTF-8
# cannot carry), drawn plane by plane so the astral planes (emoji, CJK extensions, tags, private
# use, the unassigned planes) come up as often as the first.
_PLANE = 0x10000
any_char = st.integers(0, 16).flatmap(
    lambda plane: st.characters(
        min_codepoint=max(1, plane * _PLANE),
        max_codepoint=plane * _PLANE + _PLANE - 1,
        codec="utf-8",
    )
)


def text(max_size: int, *, min_size: int = 0) -> st.SearchStrategy[str]:
    """Strings of `min_size`..`max_size` characters: mostly short, often exactly at the bound (one
    character repeated, any plane)."""
    short = st.text(any_char, min_size=min_size, max_size=min(max_size, 24))
    boundary = st.builds(
        lambda c, n: c * n,
        any_char,
        st.sampled_from(sorted({max_size, max(min_size, max_size - 1)})),
    )
    return st.one_of(short, short, boundary)


# Ids as a uint64 field carries them: the smallest, either side of the signed 64-bit bound (where
# a bigint column ends), the largest, and anything between.
uint64 = st.one_of(
    st.integers(0, 5),
    st.integers(2**63 - 2, 2**63 + 2),
    st.integers(2**64 - 3, 2**64 - 1),
    st.integers(0, 2**64 - 1),
)

# What a client can act on; anything else (UNKNOWN, INTERNAL) is a server bug.
REFUSALS = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.PERMISSION_DENIED,
    }
)
