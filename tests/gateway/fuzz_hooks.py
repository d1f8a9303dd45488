"""schemathesis hooks for the gateway's fuzz (test_hostile.py), loaded through SCHEMATHESIS_HOOKS.

A create's Idempotency-Key makes a repeat answer the first response, and the key sent again with
a different request a 422 on the field: right, but no schema can state it, and the fuzzer sends
the few key values it generates again and again with different bodies. Each well-formed key is
made unique here, so every generated create stands on its own and a schema-valid one must still be
taken; a malformed key goes as generated (its 422 is the schema's, and checked as such)."""

from __future__ import annotations

import re
import uuid
from typing import Any

import schemathesis
from schemathesis.generation.meta import CoverageScenario

from services.domain.idempotency import KEY_PATTERN, MAX_KEY

HEADER = "Idempotency-Key"
_UNIQUE = 33  # "-" and a UUID's 32 hex digits


@schemathesis.hook
def before_call(context: Any, case: Any, **kwargs: Any) -> None:
    key = (case.headers or {}).get(HEADER)
    if not isinstance(key, str) or not re.match(KEY_PATTERN, key) or len(key) > MAX_KEY:
        return
    # A coverage case that leaves a header out (Authorization) is kept exactly as generated:
    # an edited case is re-described, and the check would no longer know what it left out.
    data = case.meta.phase.data if case.meta is not None else None
    if getattr(data, "scenario", None) == CoverageScenario.MISSING_PARAMETER:
        return
    unique = uuid.uuid4().hex
    case.headers[HEADER] = f"{key}-{unique}" if len(key) + _UNIQUE <= MAX_KEY else unique
