"""Forum data for the demo, the tests and the bench: a small lab, and a realistic volume.

The lab is a known starting state for likes: course 42 with posts 1 and 2 (post 2 already liked by
user 7, like_count 1), course 99 with post 3, comments 1 and 2 on post 1, users 7, 8 and 9 enrolled
in course 42; the demo users' names (tools/people_data.py). The volume is set-based SQL
(generate_series), loaded once.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from tools.people_data import load_demo_people, load_people, volume_ids

Conn = asyncpg.Connection | PoolConnectionProxy

LAB = """
INSERT INTO courses (id, title) VALUES (42, 'Cơ sở dữ liệu'), (99, 'Mạng máy tính')
ON CONFLICT DO NOTHING;
INSERT INTO course_members (course_id, user_id, role) VALUES
  (42, 7, 'student'), (42, 8, 'student'), (42, 9, 'student'), (42, 1, 'teacher'),
  (99, 1, 'teacher')
ON CONFLICT DO NOTHING;
INSERT INTO posts (id, course_id, user_id, title, body, like_count, comment_count)
OVERRIDING SYSTEM VALUE VALUES
  (1, 42, 1, 'Thông báo: lịch thi giữa kỳ', 'Thi giữa kỳ vào thứ Hai tuần sau, phòng B1.', 0, 2),
  (2, 42, 1, 'Tài liệu tuần 3', 'Slide và bài tập về chỉ mục (index) đã được tải lên.', 1, 0),
  (3, 99, 1, 'Chào mừng các bạn', 'Forum của môn Mạng máy tính.', 0, 0)
ON CONFLICT DO NOTHING;
INSERT INTO comments (id, post_id, user_id, body) OVERRIDING SYSTEM VALUE VALUES
  (1, 1, 8, 'Thi có được mang tài liệu không ạ?'),
  (2, 1, 9, 'Em cảm ơn thầy!')
ON CONFLICT DO NOTHING;
INSERT INTO post_likes (post_id, user_id) VALUES (2, 7) ON CONFLICT DO NOTHING;
SELECT setval(pg_get_serial_sequence('posts', 'id'), GREATEST((SELECT max(id) FROM posts), 3));
SELECT setval(pg_get_serial_sequence('comments', 'id'),
              GREATEST((SELECT max(id) FROM comments), 2));
"""


@dataclass(frozen=True)
class Volume:
    courses: int = 2000
    students: int = 50_000
    posts_per_course: int = 10
    commented_posts: int = 2000
    top_comments_per_post: int = 100
    replies_per_post: int = 34

    @property
    def comments(self) -> int:
        return self.commented_posts * (self.top_comments_per_post + self.replies_per_post)


async def load_lab(conn: Conn) -> None:
    await conn.execute(LAB)
    await load_demo_people(conn)


async def load_volume_people(conn: Conn, volume: Volume) -> None:
    """The names of the volume's teachers and students (idempotent, and apart from
    load_volume: a volume loaded before the directory existed gets its names too)."""
    await load_people(conn, volume_ids(volume.courses, volume.students))


async def load_volume(conn: Conn, volume: Volume) -> bool:
    """Load the volume unless it is there already; True when it loaded something."""
    marker = f"Bài 1 của khoá {volume.courses}"
    if await conn.fetchval("SELECT 1 FROM posts WHERE title = $1 LIMIT 1", marker):
        return False
    async with conn.transaction():
        await conn.execute(
            "INSERT INTO courses (id, title) SELECT c, 'Khoá học ' || c"
            " FROM generate_series(1, $1::int) c ON CONFLICT DO NOTHING",
            volume.courses,
        )
        # Teachers are users 200000 + course; students are 100001.. and take 6 courses each.
        await conn.execute(
            "INSERT INTO course_members (course_id, user_id, role)"
            " SELECT c, 200000 + c, 'teacher' FROM generate_series(1, $1::int) c"
            " ON CONFLICT DO NOTHING",
            volume.courses,
        )
        await conn.execute(
            "INSERT INTO course_members (course_id, user_id)"
            " SELECT (u * 7 + k * 331) % $1::int + 1, u"
            " FROM generate_series(100001, 100000 + $2::int) u, generate_series(0, 5) k"
            " ON CONFLICT DO NOTHING",
            volume.courses,
            volume.students,
        )
        await conn.execute(
            "INSERT INTO posts (course_id, user_id, title, body)"
            " SELECT c, 200000 + c, 'Bài ' || n || ' của khoá ' || c,"
            " repeat('Nội dung bài viết. ', 20)"
            " FROM generate_series(1, $1::int) c, generate_series(1, $2::int) n",
            volume.courses,
            volume.posts_per_course,
        )
        # The first commented_posts posts of the volume get top-level comments, then replies
        # spread over those roots; counters are computed from the rows, so they are exact.
        first = await conn.fetchval("SELECT min(id) FROM posts WHERE title LIKE 'Bài % của khoá %'")
        await conn.execute(
            """
            INSERT INTO comments (post_id, user_id, body)
            SELECT p, 100001 + (p * 31 + n) % $3::int, 'Bình luận số ' || n
            FROM generate_series($1::bigint, $1::bigint + $2::int - 1) p,
                 generate_series(1, $4::int) n""",
            first,
            volume.commented_posts,
            volume.students,
            volume.top_comments_per_post,
        )
        # Replies come in threads of up to 20 under the first top-level comments of each post.
        await conn.execute(
            """
            INSERT INTO comments (post_id, parent_id, user_id, body)
            SELECT r.post_id, r.id, 100001 + (r.id * 17 + n) % $2::int, 'Trả lời số ' || n
            FROM generate_series(1, $3::int) n
            JOIN (SELECT id, post_id, row_number() OVER (PARTITION BY post_id ORDER BY id) AS k
                  FROM comments WHERE post_id >= $1 AND parent_id IS NULL) r
              ON r.k = (n - 1) / 20 + 1""",
            first,
            volume.students,
            volume.replies_per_post,
        )
        await conn.execute(
            """
            UPDATE comments r SET reply_count = x.n
            FROM (SELECT parent_id, count(*) AS n FROM comments
                  WHERE post_id >= $1 AND parent_id IS NOT NULL GROUP BY parent_id) x
            WHERE r.id = x.parent_id""",
            first,
        )
        await conn.execute(
            """
            UPDATE posts p SET comment_count = x.n
            FROM (SELECT post_id, count(*) AS n FROM comments
                  WHERE post_id >= $1 GROUP BY post_id) x
            WHERE p.id = x.post_id""",
            first,
        )
    await conn.execute("ANALYZE courses, course_members, posts, comments")
    return True
