"""A `changed` event names where its object is read: a stored message by its msg_id, a reply not
sent yet (no msg_id) by its conversation's newest page, which shows the replies in flight."""

from __future__ import annotations

from agora.live.v1.changed_pb2 import Changed

from services.gateway.convert import changed_json


def test_a_stored_message_too_large_for_the_stream_is_read_by_its_msg_id() -> None:
    changed = Changed(
        kind=Changed.KIND_MESSAGE,
        reason=Changed.REASON_TOO_LARGE,
        msg_id="z 1/2",
        conversation_key="t1",
    )
    data = changed_json(changed, account_id=3)
    assert data["href"] == "/api/zalo-accounts/3/messages/z%201%2F2"
    assert (data["msg_id"], data["conversation_key"]) == ("z 1/2", "t1")


def test_a_reply_not_sent_yet_is_read_on_its_conversations_newest_page() -> None:
    changed = Changed(
        kind=Changed.KIND_MESSAGE, reason=Changed.REASON_TOO_LARGE, conversation_key="t 1&x"
    )
    data = changed_json(changed, account_id=3)
    assert data["href"] == "/api/zalo-accounts/3/messages?conversation_key=t%201%26x"
    assert data["msg_id"] == ""
