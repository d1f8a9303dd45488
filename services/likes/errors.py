"""Why a like was refused before it reached a store."""


class NotEnrolledError(Exception):
    """The user is not enrolled in the course."""


class TargetNotFoundError(Exception):
    """The post or comment does not exist, is deleted, or belongs to another course."""


class BacklogFull(Exception):
    """The like backlog is at its bound (or Redis at maxmemory): retry later."""


class ColdSetError(RuntimeError):
    """The liked SET vanished again right after warming (memory pressure?): retry later."""
