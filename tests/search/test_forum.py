"""Searching a course: posts, comments and replies written through ingest, published on the
course's live feed after their COMMIT, indexed from it, and searched through timeline as the
gateway calls it for an enrolled reader."""

from __future__ import annotations

import grpc
import pytest
from agora.forum.v1 import forum_write_service_pb2 as write_pb
from agora.forum.v1 import forum_write_service_pb2_grpc
from agora.search.v1 import search_service_pb2 as pb
from agora.search.v1 import search_service_pb2_grpc

from services.search.indexer import Indexer

pytestmark = pytest.mark.asyncio
Search = search_service_pb2_grpc.SearchServiceStub
Writes = forum_write_service_pb2_grpc.ForumWriteServiceStub
# The forum lab: users 7, 8 and 9 study course 42; user 1 teaches 42 and 99.
COURSE, OTHER, TEACHER, STUDENT = 42, 99, 1, 8


async def post(
    writes: Writes, title: str, body: str, course: int = COURSE, user: int = STUDENT
) -> int:
    created = await writes.CreatePost(
        write_pb.CreatePostRequest(course_id=course, user_id=user, title=title, body=body)
    )
    return int(created.post.id)


async def comment(
    writes: Writes, post_id: int, body: str, parent: int | None = None, user: int = STUDENT
) -> int:
    created = await writes.CreateComment(
        write_pb.CreateCommentRequest(
            course_id=COURSE, post_id=post_id, user_id=user, body=body, parent_id=parent
        )
    )
    return int(created.comment.id)


async def hits(search: Search, query: str, course: int = COURSE, user: int = 7) -> list[str]:
    """Each hit as "p<post>" or "c<comment>", in rank order, through every page."""
    found: list[str] = []
    cursor = ""
    while True:
        page = await search.SearchCourse(
            pb.SearchCourseRequest(
                course_id=course, user_id=user, query=query, cursor=cursor, limit=3
            )
        )
        found += [
            f"c{h.comment.id}" if h.HasField("comment") else f"p{h.post.id}" for h in page.hits
        ]
        if not page.next_cursor:
            return found
        cursor = page.next_cursor


async def test_posts_comments_and_replies_are_found_ranked(
    forum_writes: Writes, search_indexer: Indexer, search: Search
) -> None:
    first = await post(forum_writes, "Khoá luận tốt nghiệp", "Hạn nộp khoá luận là thứ Sáu.")
    folded = await comment(forum_writes, first, "khoa luan can bao nhieu trang a?")
    scattered = await comment(forum_writes, first, "Luận văn hay khoá luận đều được")
    reply = await comment(forum_writes, first, "Khoá luận tối thiểu 40 trang", parent=folded)
    await search_indexer.catch_up()
    assert await hits(search, "khoá luận") == [
        f"c{reply}",
        f"c{scattered}",
        f"p{first}",
        f"c{folded}",
    ]
    reversed_words = await search.SearchCourse(
        pb.SearchCourseRequest(course_id=COURSE, user_id=7, query="luận khoá")
    )
    assert [h.match.kind for h in reversed_words.hits] == [pb.MATCH_KIND_EXACT_WORDS] * 3 + [
        pb.MATCH_KIND_FOLDED_WORDS
    ]

    page = await search.SearchCourse(
        pb.SearchCourseRequest(course_id=COURSE, user_id=7, query="bao nhieu trang")
    )
    (hit,) = page.hits
    assert hit.comment.id == folded
    assert hit.comment_post.id == first
    assert hit.comment_post.title == "Khoá luận tốt nghiệp"
    assert hit.comment.author_name  # the directory's name beside the id
    assert [f.text for f in hit.match.fragments if f.highlighted] == ["bao", "nhieu", "trang"]


async def test_an_edit_is_found_by_its_new_text_only_even_before_it_is_indexed(
    forum_writes: Writes, search_indexer: Indexer, search: Search
) -> None:
    edited = await post(forum_writes, "Lịch thi cuối kỳ", "Phòng thi sẽ báo sau.")
    note = await comment(forum_writes, edited, "Em chưa thấy phòng thi ạ")
    await search_indexer.catch_up()
    assert await hits(search, "thi cuối kỳ") == [f"p{edited}"]

    await forum_writes.EditPost(
        write_pb.EditPostRequest(
            course_id=COURSE, post_id=edited, user_id=STUDENT, title="Lịch kiểm tra giữa kỳ"
        )
    )
    await forum_writes.EditComment(
        write_pb.EditCommentRequest(
            course_id=COURSE, comment_id=note, user_id=STUDENT, body="Đã thấy lịch rồi ạ"
        )
    )
    # The index still holds the old words; what it proposes is matched against the table.
    assert await hits(search, "thi cuối kỳ") == []
    assert await hits(search, "chưa thấy phòng") == []
    await search_indexer.catch_up()
    assert await hits(search, "thi cuối kỳ") == []
    assert await hits(search, "kiem tra giua ky") == [f"p{edited}"]
    assert await hits(search, "đã thấy lịch") == [f"c{note}"]


async def test_deleted_texts_and_what_they_held_are_never_found(
    forum_writes: Writes, search_indexer: Indexer, search: Search
) -> None:
    gone = await post(forum_writes, "Đề cương ôn tập", "Đề cương gồm năm chương.")
    under_gone = await comment(forum_writes, gone, "Đề cương có đáp án không?")
    kept = await post(forum_writes, "Hỏi đề cương", "Ai có đề cương chương ba?")
    root = await comment(forum_writes, kept, "Đề cương chương ba ở thư viện")
    reply = await comment(forum_writes, kept, "Cảm ơn, đề cương đây rồi", parent=root)
    other = await comment(forum_writes, kept, "Mình cũng cần đề cương")
    await search_indexer.catch_up()
    assert len(await hits(search, "đề cương")) == 6

    await forum_writes.DeletePost(
        write_pb.DeletePostRequest(course_id=COURSE, post_id=gone, user_id=STUDENT)
    )
    await forum_writes.DeleteComment(
        write_pb.DeleteCommentRequest(course_id=COURSE, comment_id=root, user_id=STUDENT)
    )
    # Before the indexer hears of it, and after.
    for _ in range(2):
        found = await hits(search, "de cuong")
        assert sorted(found) == sorted([f"p{kept}", f"c{other}"])
        assert f"c{under_gone}" not in found
        assert f"c{reply}" not in found
        await search_indexer.catch_up()


async def test_a_course_sees_only_its_own_texts_and_only_its_members_search(
    forum_writes: Writes, search_indexer: Indexer, search: Search
) -> None:
    mine = await post(forum_writes, "Giao thức TCP", "Bắt tay ba bước", course=COURSE, user=TEACHER)
    theirs = await post(
        forum_writes, "Giao thức TCP", "Bắt tay ba bước", course=OTHER, user=TEACHER
    )
    await search_indexer.catch_up()
    assert await hits(search, "giao thuc tcp", COURSE, TEACHER) == [f"p{mine}"]
    assert await hits(search, "giao thuc tcp", OTHER, TEACHER) == [f"p{theirs}"]
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await hits(search, "giao thuc tcp", OTHER, 7)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
