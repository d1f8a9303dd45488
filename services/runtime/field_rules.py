"""Request field rules checked before the handler runs, from one declared table (the project's
is services/domain/field_rules.py): a call breaking any answers INVALID_ARGUMENT with every
violation, as BadRequest field violations, and its handler is never called. The shape of
protovalidate's interceptor, with the rules in Python: one place, the existing error details,
and no CEL evaluation on the hot IngestMessages path."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

import grpc

from services.runtime.grpc_errors import FieldViolation, abort_invalid
from services.runtime.grpc_handlers import checked_first

# A request's problems with one field (or a few that go together), none when it is fine.
Rule = Callable[[Any], Iterable[FieldViolation]]
# Full method name (/package.Service/Method) → its rules, in the order their problems are told.
RuleTable = Mapping[str, Sequence[Rule]]


def violations(rules: Sequence[Rule], request: Any) -> list[FieldViolation]:
    """Every problem of `request` under `rules`, in the rules' order."""
    return [violation for rule in rules for violation in rule(request)]


class FieldRulesInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuses, before the handler runs, every request the table's rules do not allow."""

    def __init__(self, table: RuleTable) -> None:
        self._table = table

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], handler_call_details: Any
    ) -> Any:
        handler = await continuation(handler_call_details)
        rules = self._table.get(handler_call_details.method)
        if handler is None or not rules:
            return handler

        async def check(request: Any, context: grpc.aio.ServicerContext) -> None:
            # None: the requests are streamed, and their handler checks each as it reads it.
            problems = [] if request is None else violations(rules, request)
            if problems:
                await abort_invalid(context, problems)

        return checked_first(handler, check)
