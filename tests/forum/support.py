"""What the forum tests share: a reply written through the gateway, a paged route walked to its end
as a client pages it, and the nodes of a query plan."""

from __future__ import annotations

from typing import Any

import httpx


async def post_reply(
    gateway: httpx.AsyncClient, headers: dict[str, str], body: str, parent_id: int, post: int = 1
) -> httpx.Response:
    """A reply to comment `parent_id` under post `post` of course 42 (the forum lab's)."""
    return await gateway.post(
        f"/api/courses/42/posts/{post}/comments",
        json={"body": body, "parent_id": parent_id},
        headers=headers,
    )


async def walk(
    gateway: httpx.AsyncClient,
    path: str,
    headers: dict[str, str],
    *cursor: str,
    pages: int = 100,
    sized: bool = False,
) -> list[dict[str, Any]]:
    """Every item of `path`, 7 a page, each next page from the last one's `next_<cursor>` fields
    until it says there is no more; `sized`: no page holds more than 7. Fails past `pages`."""
    items: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 7}
    for _ in range(pages):
        answer = await gateway.get(path, params=params, headers=headers)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        if sized:
            assert len(body["data"]) <= 7
        items += body["data"]
        if not body["pagination"]["has_more"]:
            return items
        params = {"limit": 7, **{c: body["pagination"][f"next_{c}"] for c in cursor}}
    raise AssertionError("pagination did not end")


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """A plan node (EXPLAIN's JSON) and every node under it."""
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes += plan_nodes(child)
    return nodes
