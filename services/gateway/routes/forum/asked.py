"""What a forum route within a course is asked with, read by one dependency: the clients that
call upstream for the caller, the caller and the course of the path (and, for a route of one
post or comment, which one: resource.AskedOf)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends

from services.gateway.auth import CurrentUser, Principal
from services.gateway.clients import Clients, RequestClients
from services.gateway.params import CourseId


@dataclass(frozen=True)
class Asked:
    """About the course `course_id`, by `user`, whose `clients` ask upstream."""

    clients: Clients
    user: Principal
    course_id: int


async def _asked(clients: RequestClients, user: CurrentUser, course_id: CourseId) -> Asked:
    return Asked(clients, user, course_id)


InCourse = Annotated[Asked, Depends(_asked)]
