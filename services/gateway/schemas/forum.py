"""JSON shapes of the course forum routes (services/gateway/routes/forum/)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator
from pydantic.config import JsonDict

from services.domain.ids import MAX_ROW_ID
from services.domain.text import MAX_BODY, MAX_REASON, MAX_TITLE, REASON_PATTERN, TEXT_PATTERN
from services.gateway.schemas.base import Pagination, Person, RequestModel, Success

LikedByMe = Annotated[
    bool | None,
    Field(description="Whether the caller liked it; null when the likes service is unavailable"),
]

EditedAt = Annotated[
    str | None,
    Field(description="When it was last edited; null if never (its earlier texts: …/revisions)"),
]

Version = Annotated[
    int,
    Field(
        description="1 when written, one more with each edit and with the removal: of two states"
        " of one object, keep the higher version"
    ),
]


class Post(BaseModel):
    id: int
    course_id: int
    user_id: int
    author_name: str | None = Field(
        description="The author's display name (the people directory, docs/people.md); null "
        "when it does not know them, and in a write's answer and a live event"
    )
    title: str
    body: str
    like_count: int
    comment_count: int
    created_at: str
    edited_at: EditedAt
    version: Version
    liked_by_me: LikedByMe


class Comment(BaseModel):
    id: int
    post_id: int
    parent_id: int | None = Field(description="The top-level comment a reply belongs to")
    user_id: int
    author_name: str | None = Field(
        description="The author's display name (the people directory, docs/people.md); null "
        "when it does not know them, and in a write's answer and a live event"
    )
    body: str | None = Field(description="Null on a removed comment's placeholder")
    like_count: int
    reply_count: int = Field(description="0 on a removed comment: its replies went with it")
    reply_to_comment_id: int | None = Field(description="For a reply to a reply: which one")
    reply_to_user_id: int | None = Field(description="For a reply to a reply: whose")
    created_at: str
    edited_at: EditedAt
    version: Version
    liked_by_me: LikedByMe
    deleted: bool = Field(
        description="A placeholder: a teacher removed this comment (a thread keeps it, without "
        "its text, so the replies around it still make sense)"
    )
    removed_by: Person | None = Field(description="The teacher who removed it")
    removal_reason: str | None = Field(description="Why, as the teacher said")
    removed_at: str | None = Field(description="When it was removed")


class FeedPagination(Pagination):
    next_before_id: int | None


class CommentPagination(Pagination):
    next_after_id: int | None


class Membership(BaseModel):
    course_id: int
    title: str = Field(description="The course's title in the catalogue")
    role: Literal["student", "teacher"] = Field(description="What the caller is in the course")
    joined_at: str


class CoursesPage(Success):
    data: list[Membership]
    pagination: CommentPagination


class Liker(BaseModel):
    user_id: int
    name: str | None = Field(
        description="Their display name; null when the directory does not know them"
    )
    liked_at: str


class LikersPagination(Pagination):
    next_before_liked_at: str | None
    next_before_user_id: int | None


class LikersPage(Success):
    data: list[Liker]
    pagination: LikersPagination


class Revision(BaseModel):
    id: int
    title: str | None = Field(description="A post's title then; null for a comment")
    body: str
    written_at: str = Field(description="When this text was written (created, or edited before)")
    replaced_at: str = Field(description="When an edit replaced it")
    replaced_by: int = Field(description="Who edited: the author, or a teacher of the course")


class RevisionsPage(Success):
    data: list[Revision]
    pagination: FeedPagination


class ModerationAction(BaseModel):
    id: int
    course_id: int
    moderator_id: int = Field(description="The teacher who acted")
    moderator_name: str | None = Field(description="The teacher's display name")
    action: Literal["delete", "edit"]
    post_id: int = Field(description="The post acted on, or the post of the comment acted on")
    comment_id: int | None = Field(description="The comment acted on, if it was one")
    author_id: int = Field(description="Whose post or comment it was")
    author_name: str | None = Field(description="The author's display name")
    reason: str | None
    created_at: str


class ModerationPage(Success):
    data: list[ModerationAction]
    pagination: FeedPagination


class PostsPage(Success):
    data: list[Post]
    pagination: FeedPagination


class PostResponse(Success):
    data: Post


class CommentsPage(Success):
    data: list[Comment]
    pagination: CommentPagination


class CommentResponse(Success):
    data: Comment


# Stated here, enforced by ingest (services/domain/text.py): the same pattern.
_TEXT: JsonDict = {"pattern": TEXT_PATTERN}


# A post's or comment's body.
PostText = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_BODY,
        description=f"1-{MAX_BODY:,} characters, not blank, no NUL",
        json_schema_extra=_TEXT,
    ),
]


class NewPost(RequestModel):
    title: str = Field(
        min_length=1,
        max_length=MAX_TITLE,
        description=f"1-{MAX_TITLE} characters, not blank, no NUL",
        json_schema_extra=_TEXT,
    )
    body: PostText


class NewComment(RequestModel):
    body: PostText
    parent_id: int | None = Field(
        default=None,
        ge=1,
        le=MAX_ROW_ID,
        description="Reply to this comment (a reply to a reply is placed under its root)",
    )


# A teacher's reason for acting on another member's post or comment.
ModerationReason = Annotated[
    str | None,
    Field(
        default=None,
        max_length=MAX_REASON,
        pattern=REASON_PATTERN,
        description=f"A teacher's reason for editing another member's post or comment (at most "
        f"{MAX_REASON} characters), kept in the course's moderation log",
    ),
]


class PostEdit(RequestModel):
    # One of the two, as a string (a null is "no change"): stated so a client, and a fuzzer,
    # knows that {} changes nothing and is refused.
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"required": [field], "properties": {field: {"type": "string"}}}
                for field in ("title", "body")
            ]
        }
    )

    title: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_TITLE,
        description=f"The new title: 1-{MAX_TITLE} characters, not blank, no NUL",
        json_schema_extra=_TEXT,
    )
    body: PostText | None = None
    reason: ModerationReason = None

    @model_validator(mode="after")
    def _changes_something(self) -> PostEdit:
        if self.title is None and self.body is None:
            raise ValueError("give a new title, a new body or both")
        return self


class CommentEdit(RequestModel):
    body: PostText
    reason: ModerationReason = None


class Deleted(BaseModel):
    deleted: bool


class DeletedResponse(Success):
    data: Deleted


class LikeBody(RequestModel):
    # Strict: JSON true or false only; 0, 1 or "yes" say nothing a caller meant to say.
    like: StrictBool = Field(description="true to like, false to unlike")


class LikeResponse(Success):
    liked: bool
    changed: bool = Field(description="false when it already was in the requested state")
