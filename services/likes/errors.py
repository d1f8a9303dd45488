"""Why a like was refused before it reached a store."""


class NotEnrolledError(Exception):
    """The user is not enrolled in the course."""


class TargetNotFoundError(Exception):
    """The post or comment does not exist, is deleted, or belongs to another course."""


class ColdSetError(RuntimeError):
    """The liked SET vanished again right after warming (memory pressure?): retry later."""
