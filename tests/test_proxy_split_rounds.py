"""The rounds of a collapsed search are read as they come: each half of a split first window is
decoded as soon as its answer is in, while the other half is still on its way."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from neardup.proxy.handlers import collapsed_search
from neardup.proxy.transport import jsonio, rawjson

ANSWER = b'{"took":1,"hits":{"total":{"value":1,"relation":"eq"},"max_score":1.0,' \
         b'"hits":[{"_index":"i","_id":"1","_score":1.0,"_source":{"a":1}}]}}'


async def _answer(status: int, body: bytes) -> tuple[int, Any, bytes]:
    return status, {"Content-Type": "application/json"}, body


def test_a_round_is_read_when_it_is_answered_200() -> None:
    status, headers, raw, read = asyncio.run(collapsed_search._read_round(_answer(200, ANSWER)))
    assert (status, raw) == (200, ANSWER)
    assert jsonio.dumps(read) == ANSWER
    assert read["took"] == 1 and read["hits"]["hits"][0]["_id"] == "1"


def test_an_unreadable_round_keeps_its_error_for_the_caller() -> None:
    *_, read = asyncio.run(collapsed_search._read_round(_answer(200, b'{"hits": NaN}')))
    assert isinstance(read, ValueError)
    with pytest.raises(ValueError):
        rawjson.loads_search(b'{"hits": NaN}')


def test_a_refused_round_is_not_read() -> None:
    status, _, raw, read = asyncio.run(collapsed_search._read_round(_answer(400, b"not json")))
    assert (status, raw, read) == (400, b"not json", None)


def test_the_first_half_is_read_before_the_second_is_answered(monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[bytes] = []

    def loads_search(raw: bytes) -> Any:
        read.append(raw)
        return {"raw": raw}

    monkeypatch.setattr(rawjson, "loads_search", loads_search)

    async def scenario() -> list[Any]:
        loop = asyncio.get_running_loop()
        first, second = loop.create_future(), loop.create_future()

        async def fetch(answer: asyncio.Future[tuple[int, Any, bytes]]) -> tuple[int, Any, bytes]:
            return await answer

        together = asyncio.ensure_future(collapsed_search._together(
            [collapsed_search._read_round(fetch(first)), collapsed_search._read_round(fetch(second))]))
        first.set_result((200, {}, b"first"))
        for _ in range(5):
            await asyncio.sleep(0)
        assert read == [b"first"]            # read while the second half is still awaited
        second.set_result((200, {}, b"second"))
        return await together

    rounds = asyncio.run(scenario())
    assert read == [b"first", b"second"]
    assert [r[3] for r in rounds] == [{"raw": b"first"}, {"raw": b"second"}]   # in round order
