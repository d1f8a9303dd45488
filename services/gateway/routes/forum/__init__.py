"""Course forum routes: your courses, and in a course its feed, posts, comments, replies, create,
edit (with their earlier texts) and delete, who liked what, and the teachers' moderation log.

The token's subject is the acting user; the services check enrolment (403) and that the post or
comment belongs to the course of the URL (404).

A post and a comment are read, deleted, edited, listed under, revised and liked through the same
routes, each declared once (resource.py, revisions.py, likes.py) and told apart by posts.POST and
comments.COMMENT; what only one of them has stays in its own module.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from services.gateway.routes.forum import (
    comments,
    courses,
    likes,
    moderation,
    posts,
    resource,
    revisions,
)

courses_router = courses.router

# Every route within a course, on one router (the app and the tests read its routes directly).
router = APIRouter(prefix="/api/courses/{course_id}", tags=["forum"])
posts.add_routes(router)
resource.add_routes(router, posts.POST)
comments.add_routes(router)
resource.add_routes(router, comments.COMMENT)
BOTH: tuple[resource.Resource[Any, Any], ...] = (posts.POST, comments.COMMENT)
for each in BOTH:
    revisions.add_routes(router, each)
moderation.add_routes(router)
for each in BOTH:
    likes.add_likers_route(router, each)
for each in BOTH:
    likes.add_like_route(router, each)
