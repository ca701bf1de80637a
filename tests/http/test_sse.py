import json

import httpx
import pytest

from tercet.http.sse import DONE_EVENT, encode_event


@pytest.mark.parametrize("text", ["plain", "é 中文 🙂", "a\u2028b", "a\u2029b", "a\x85b", "tab\tnew\nline\r"])
def test_every_event_is_one_line_for_line_splitting_clients(text):
    body = encode_event({"text": text}) + DONE_EVENT
    # httpx splits lines like str.splitlines: on U+2028, U+2029 and U+0085 too.
    lines = [line for line in httpx.Response(200, content=body).iter_lines() if line]
    assert lines[1] == "data: [DONE]"
    assert json.loads(lines[0].removeprefix("data: ")) == {"text": text}
