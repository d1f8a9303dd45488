"""The demo team of each demo Zalo account (docs/team.md): who works it, with what role, and a
few canned replies. Idempotent (fixed keys), loaded by `make up`'s demo data and by the tests.

The roster agrees with the development sign-in's tokens (services/gateway/dev_signin.py): a
person is on an account's roster exactly when their demo token grants the account.
"""

from __future__ import annotations

from services.runtime.mysql import Connection

# (account, user, role): user 1 owns every demo account; users 7 and 8 share account 1.
ROSTER = (
    (1, 1, "owner"),
    (2, 1, "owner"),
    (3, 1, "owner"),
    (1, 7, "agent"),
    (2, 7, "agent"),
    (1, 8, "agent"),
    (3, 8, "agent"),
)
# (account, shortcut, body), written by the accounts' owner.
CANNED_REPLIES = (
    (1, "chao", "Chào {{contact_name}}, em là {{agent_name}}, em có thể giúp gì ạ?"),
    (
        1,
        "cam_on",
        "Dạ em cảm ơn {{contact_name}} đã liên hệ shop ạ. Chúc anh/chị một ngày vui vẻ!",
    ),
    (1, "giao_hang", "Dạ đơn của mình sẽ được giao trong 2–3 ngày làm việc ạ."),
)
CANNED_BY = 1


async def load_team(tx: Connection) -> None:
    """The demo rosters and canned replies, on `tx` (the demo accounts exist already)."""
    await tx.executemany(
        "INSERT INTO zalo_account_agents (zalo_account_id, user_id, role) VALUES (%s, %s, %s)"
        " ON DUPLICATE KEY UPDATE role = VALUES(role)",
        ROSTER,
    )
    await tx.executemany(
        "INSERT INTO zalo_canned_replies (zalo_account_id, shortcut, body, updated_by)"
        " VALUES (%s, %s, %s, %s) ON DUPLICATE KEY UPDATE body = VALUES(body)",
        [(*reply, CANNED_BY) for reply in CANNED_REPLIES],
    )
