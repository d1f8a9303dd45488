"""JSON shapes of the search routes (services/gateway/routes/search.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from services.gateway.schemas.base import Success
from services.gateway.schemas.forum import Comment, Post
from services.gateway.schemas.messaging import Message

NextCursor = Field(
    description="The next page's `cursor` (with the same q and scope); null on the last page"
)


class Fragment(BaseModel):
    text: str
    highlighted: bool = Field(description="A word the query matched: shown marked")


class SearchMatch(BaseModel):
    kind: Literal["exact_phrase", "exact_words", "folded_phrase", "folded_words"] = Field(
        description="How it matched, best first: the query's words with their marks as a "
        "phrase, with their marks anywhere, without marks as a phrase, without marks anywhere"
    )
    fragments: list[Fragment] = Field(
        description="A snippet of the matched text (a post: its title, then its body) around "
        "the first match, in order; concatenated they are the snippet"
    )
    cut_before: bool = Field(description="The snippet starts after the start of the text")
    cut_after: bool = Field(description="The snippet ends before the end of the text")


class MessageHit(BaseModel):
    message: Message
    archived: bool = Field(description="The message is in the archive (beyond the newest 500)")
    match: SearchMatch


class MessageSearchPage(Success):
    hits: list[MessageHit] = Field(
        description="Ranked: exact before folded, phrase before scattered, then newest first"
    )
    next_cursor: str | None = NextCursor


class CourseHit(BaseModel):
    type: Literal["post", "comment"]
    post: Post = Field(description="The post found, or the post of the comment found")
    comment: Comment | None = Field(description="The comment found (a reply: parent_id set)")
    match: SearchMatch


class CourseSearchPage(Success):
    hits: list[CourseHit] = Field(
        description="Ranked: exact before folded, phrase before scattered, then newest first"
    )
    next_cursor: str | None = NextCursor
