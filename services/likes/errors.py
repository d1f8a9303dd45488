"""Why a like was refused before it reached a store."""


class NotEnrolledError(Exception):
    """The user is not enrolled in the course."""


class TargetNotFoundError(Exception):
    """The post or comment does not exist, is deleted, or belongs to another course."""


class BacklogFull(Exception):
    """The like backlog is at its bound (or Redis at maxmemory): retry later."""


class ColdSetError(RuntimeError):
    """The liked SET could not be warmed in time (it vanished again right after warming, or a
    direct pod kept writing the user's likes): retry later."""


class EarlierToggleUnflushed(Exception):
    """A direct (sync or counterless) toggle follows the user's toggle of the same target that a
    buffered pod acknowledged and the flusher has not applied in time: retry later."""
