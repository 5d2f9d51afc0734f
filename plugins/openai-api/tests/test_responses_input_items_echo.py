"""``GET /v1/responses/{id}/input_items`` through the official ``openai``
SDK on the scripted ``echo`` driver: the items a kept response was made
from (those of the responses it continued first), as ``ResponseItem``
objects, a page at a time (``after``, ``before``, ``limit``, ``order``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest


def test_items_of_a_chain_in_pages(client: openai.OpenAI) -> None:
    first = client.responses.create(
        model="echo", input=[{"role": "developer", "content": "Dev."}, {"role": "user", "content": "one"}]
    )
    second = client.responses.create(
        model="echo",
        previous_response_id=first.id,
        input=[{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "two"}]}],
    )
    listed = client.responses.input_items.list(second.id, order="asc")
    items = listed.data
    assert [i.type for i in items] == ["message"] * 4
    assert [i.role for i in items] == ["developer", "user", "assistant", "user"]  # type: ignore[union-attr]
    assert items[2].id == first.output[0].id  # the earlier response's output, as it was answered
    assert items[1].content[0].type == "input_text" and items[1].content[0].text == "one"  # type: ignore[union-attr]
    assert all(i.id and i.status == "completed" for i in items)  # type: ignore[union-attr]
    assert listed.has_more is False
    # Default order is desc: the newest item first.
    newest = client.responses.input_items.list(second.id)
    assert [i.id for i in newest.data] == [i.id for i in items][::-1]
    # Pages of 3 then 1, the SDK following `after`.
    page = client.responses.input_items.list(second.id, order="asc", limit=3)
    assert [i.id for i in page.data] == [i.id for i in items[:3]] and page.has_more is True
    assert [i.id for i in client.responses.input_items.list(second.id, order="asc", limit=3)] == [
        i.id for i in items
    ]
    # The first response's own items: its input only.
    assert len(client.responses.input_items.list(first.id).data) == 2


def test_before_and_raw_page(raw: httpx.Client, client: openai.OpenAI) -> None:
    done = client.responses.create(model="echo", input="just this")
    ids = [i.id for i in client.responses.input_items.list(done.id).data]
    assert len(ids) == 1
    page = raw.get(f"/v1/responses/{done.id}/input_items", params={"before": ids[0]}).json()
    assert page == {"object": "list", "data": [], "first_id": None, "last_id": None, "has_more": False}
    asked = {"include[]": "reasoning.encrypted_content"}
    found = raw.get(f"/v1/responses/{done.id}/input_items", params=asked)
    assert found.status_code == 200 and found.json()["first_id"] == ids[0]


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 101}, "limit"),
        ({"order": "up"}, "order"),
        ({"after": "x"}, "after"),
    ],
)
def test_bad_queries(
    client: openai.OpenAI, query: dict[str, Any], param: str, refused: Callable[..., openai.BadRequestError]
) -> None:
    done = client.responses.create(model="echo", input="x")
    error = refused(client.responses.input_items.list, response_id=done.id, **query)
    assert error.param == param  # type: ignore[attr-defined]


def test_unknown_or_unstored(client: openai.OpenAI) -> None:
    unstored = client.responses.create(model="echo", input="x", store=False)
    for response_id in (unstored.id, "resp_nope"):
        with pytest.raises(openai.NotFoundError):
            client.responses.input_items.list(response_id)


def test_chain_with_a_deleted_link(client: openai.OpenAI) -> None:
    """A response whose earlier response was deleted keeps listing its own
    input, and continuing from it is a 400 naming the deleted one (not
    "not found" for a response that is kept)."""
    first = client.responses.create(model="echo", input="one")
    second = client.responses.create(model="echo", input="two", previous_response_id=first.id)
    client.responses.delete(first.id)
    items = client.responses.input_items.list(second.id).data
    assert [i.content[0].text for i in items] == ["two"]  # type: ignore[union-attr]
    assert client.responses.retrieve(second.id).output_text == "two"
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="echo", input="three", previous_response_id=second.id)
    assert first.id in caught.value.message and "deleted" in caught.value.message
    assert caught.value.param == "previous_response_id"
