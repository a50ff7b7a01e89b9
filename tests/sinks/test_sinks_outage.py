"""A store that does not answer, told apart from one that refused a document; its URL shown without its
password. The real client errors: a refused connection to a real (closed) port, through redis-py and httpx."""

from __future__ import annotations

import socket

import httpx
import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

from unichunk.sinks.base import InvalidRequest, SinkError, redacted_url
from unichunk.sinks.outage import StoreUnreachable, hide_passwords, unreachable

SECRET_CHARS = st.characters(whitelist_categories=("Lu", "Ll", "Nd"), whitelist_characters="-_.~!$&'()*+,;=")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed when this returns: nothing listens there


def test_a_refused_connection_is_unreachable_through_the_sink_that_wrapped_it() -> None:
    port = _closed_port()
    client = redis.Redis.from_url(f"redis://:pw@127.0.0.1:{port}", socket_connect_timeout=2)
    with pytest.raises(redis.exceptions.ConnectionError) as refused:
        client.ping()
    try:
        raise SinkError("graph", f"write failed on falkordb: {refused.value}") from refused.value
    except SinkError as wrapped:
        assert unreachable(wrapped) is refused.value
    with pytest.raises(httpx.ConnectError) as http_refused:
        httpx.get(f"http://127.0.0.1:{port}/", timeout=2)
    assert unreachable(http_refused.value) is http_refused.value


def test_a_refused_document_is_not_unreachable() -> None:
    assert unreachable(InvalidRequest("graph", "cannot write a batch prepared by sink 'vectors'")) is None
    assert unreachable(ValueError("lone surrogate")) is None
    assert unreachable(redis.exceptions.ResponseError("unique constraint violated")) is None


def test_the_message_names_the_store_and_its_url_in_one_line() -> None:
    cause = ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 6379)")
    error = StoreUnreachable.of("graph", redacted_url("redis://:pw@127.0.0.1:6379"), cause)
    text = str(error)
    assert text.startswith(
        "[graph] store unreachable at redis://:***@127.0.0.1:6379 (ConnectionRefusedError:"
    )
    assert "\n" not in text and "pw@" not in text
    assert error.sink == "graph"


@given(user=st.text(SECRET_CHARS, max_size=12), password=st.text(SECRET_CHARS, min_size=1, max_size=40))
def test_no_password_survives_in_a_shown_url(user: str, password: str) -> None:
    url = f"redis://{user}:{password}@db.internal:6379/0"
    shown = redacted_url(url)
    assert shown == f"redis://{user}:***@db.internal:6379/0"
    assert f":{password}@" not in hide_passwords(f"Error connecting to {url}: refused")
