"""What a failure means for whoever retries: the one classification of datastore errors.

Each datastore module registers how its own exceptions are classified when it is imported, so
this module needs none of them and nothing imports upwards. Callers ask `classify(exc)`:
- TRANSIENT: the same work can succeed later (connection lost, timeout, deadlock, server restart);
- DATA: the data itself is refused and retrying it can never help (a constraint, a bad value);
- OTHER: anything else, e.g. infrastructure that is wrong until an operator acts (a missing
  table, a revoked grant, out of memory).

Code that finds a value it can never use (an enum value it does not know, a time beyond what a
column holds) raises DataError: DATA, like a constraint the database enforces, so a consumer
dead-letters it with its reason instead of stalling a shard on it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable


class ErrorKind(enum.Enum):
    TRANSIENT = "transient"
    DATA = "data"
    OTHER = "other"


class DataError(Exception):
    """The data itself cannot be used, whoever retries it and whenever (the message says why)."""


Classifier = Callable[[BaseException], ErrorKind | None]

_classifiers: list[Classifier] = []


def register(classifier: Classifier) -> None:
    """Add a classifier: it returns a kind for the exceptions it knows, None for the rest."""
    if classifier not in _classifiers:
        _classifiers.append(classifier)


def classify(exc: BaseException) -> ErrorKind:
    """The kind of `exc` according to the first registered classifier that knows it."""
    if isinstance(exc, DataError):
        return ErrorKind.DATA
    for classifier in _classifiers:
        kind = classifier(exc)
        if kind is not None:
            return kind
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return ErrorKind.TRANSIENT
    return ErrorKind.OTHER


def is_transient(exc: BaseException) -> bool:
    """True when retrying the same work later can succeed."""
    return classify(exc) is ErrorKind.TRANSIENT
