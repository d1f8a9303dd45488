"""The people of the demo data: realistic Vietnamese names (family, middle, given; NFC), fixed for
the demo users and generated deterministically for the volume's teachers and students, so every
load and every machine gives user 100123 the same name.

A name is family + middle + given (Nguyễn Thị Lan), the middle and given names by the person's
gender; families come about as often as in Vietnam (Nguyễn about a third, then Trần, Lê, Phạm …).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from services.domain.people import display_name, initials

Conn = asyncpg.Connection | PoolConnectionProxy | asyncpg.Pool

# The demo users of `make up` (services/gateway/dev_signin.py): 7 is an agent of accounts 1 and 2
# and a student, 8 an agent of account 3 and a student, 9 a student, 1 the teacher of courses
# 42 and 99 and an agent of every account.
DEMO_PEOPLE = {
    1: "Trần Quốc Bảo",
    7: "Nguyễn Thị Lan",
    8: "Lê Hoàng Nam",
    9: "Phạm Thu Hà",
}

# Weighted by how common they are: a family appears as many times as its share.
FAMILIES = (
    ["Nguyễn"] * 12
    + ["Trần"] * 4
    + ["Lê"] * 4
    + ["Phạm"] * 3
    + ["Hoàng", "Huỳnh", "Phan", "Vũ", "Võ", "Đặng", "Bùi", "Đỗ", "Hồ", "Ngô", "Dương", "Lý"]
)
MIDDLE = {
    "f": ["Thị", "Thị", "Ngọc", "Thu", "Thanh", "Minh", "Khánh", "Bảo", "Mỹ", "Phương"],
    "m": ["Văn", "Văn", "Hữu", "Đức", "Minh", "Quang", "Công", "Gia", "Thành", "Anh"],
}
GIVEN = {
    "f": [
        "Lan", "Hương", "Mai", "Linh", "Trang", "Hạnh", "Thảo", "Ngọc", "Phương", "Yến",
        "Hằng", "Nhung", "Vy", "Anh", "Hoa", "Huyền", "Nga", "Quỳnh", "Thủy", "Loan",
        "Trâm", "Diệp", "Uyên", "Châu",
    ],
    "m": [
        "Hùng", "Dũng", "Tuấn", "Minh", "Nam", "Sơn", "Hải", "Long", "Phúc", "Quân",
        "Khoa", "Huy", "Đạt", "Thắng", "Tú", "Bảo", "Trung", "Vinh", "Cường", "Hiếu",
        "Khải", "Lộc", "Nghĩa", "Tâm",
    ],
}  # fmt: skip


def _mix(user_id: int, salt: int) -> int:
    """A well-spread, deterministic number from the id (Knuth's multiplicative hash)."""
    return ((user_id * 2654435761 + salt * 40503) % 2**32) >> 7


def generated_name(user_id: int) -> str:
    """User `user_id`'s demo name, the same on every load."""
    gender = "f" if _mix(user_id, 1) % 2 else "m"
    family = FAMILIES[_mix(user_id, 2) % len(FAMILIES)]
    middle = MIDDLE[gender][_mix(user_id, 3) % len(MIDDLE[gender])]
    givens = GIVEN[gender]
    k = _mix(user_id, 4) % len(givens)
    # Not the middle name again (Ngọc Ngọc).
    given = givens[k] if givens[k] != middle else givens[(k + 1) % len(givens)]
    return unicodedata.normalize("NFC", f"{family} {middle} {given}")


def name_of(user_id: int) -> str:
    return DEMO_PEOPLE.get(user_id) or generated_name(user_id)


def volume_ids(courses: int, students: int) -> list[int]:
    """The forum volume's people (tools/forum_data.py): its students (100001 …) and its
    teachers (200000 + course)."""
    return [*range(100_001, 100_001 + students), *range(200_001, 200_001 + courses)]


async def load_people(conn: Conn, user_ids: Iterable[int]) -> None:
    """Upsert the directory entries of `user_ids` (idempotent: an unchanged name is not
    rewritten), in one statement."""
    ids = sorted(set(user_ids))
    names = [display_name(name_of(i)) for i in ids]
    await conn.execute(
        "INSERT INTO people (user_id, display_name, initials)"
        " SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[])"
        " ON CONFLICT (user_id) DO UPDATE"
        " SET display_name = EXCLUDED.display_name, initials = EXCLUDED.initials,"
        " updated_at = now()"
        " WHERE (people.display_name, people.initials)"
        " IS DISTINCT FROM (EXCLUDED.display_name, EXCLUDED.initials)",
        ids,
        names,
        [initials(n) for n in names],
    )


async def load_demo_people(conn: Conn) -> None:
    await load_people(conn, DEMO_PEOPLE)
