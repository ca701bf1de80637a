"""Tool calls out: ``tool_calls`` deltas in a stream, and the finish reason of an answer that calls.

:class:`ToolCallDeltas` turns one streamed
completion into OpenAI's deltas: content as it becomes certain, then for
each call a first delta with its id, type and name, and its arguments as
they are written.
"""

from __future__ import annotations

from tercet.ipc.messages import FinishKind, FinishReason
from tercet.tools.reader import ToolCallReader, call_object, new_call_id


def finish_reason_with_calls(finish_reason: FinishReason | None, has_calls: bool) -> str | None:
    """OpenAI's finish reason: "tool_calls" for an answer that ended by calling."""
    if finish_reason is None:
        return None
    if has_calls and finish_reason.kind is FinishKind.STOP:
        return "tool_calls"
    return finish_reason.kind.value


class ToolCallDeltas:
    """One streamed completion's text, sent as content and tool-call deltas."""

    def __init__(self, reader: ToolCallReader):
        self.reader = reader
        self.calls = reader.stream()
        self.text = ""
        self.sent_content = ""
        self.sent_calls: list[tuple[str, str, str]] = []  # (id, name, arguments sent)

    @property
    def has_calls(self) -> bool:
        return bool(self.sent_calls)

    def add(self, text: str, final: bool) -> list[dict]:
        """The deltas that ``text``, the completion's next piece, makes certain."""
        self.text += text
        parsed = self.calls.parse(self.text, final)
        deltas = []
        content = parsed.content
        if content != self.sent_content:
            self._check_grows(self.sent_content, content, "content")
            deltas.append({"content": content[len(self.sent_content):]})
            self.sent_content = content
        if len(parsed.calls) < len(self.sent_calls):
            raise self.reader.failure("it dropped a call it had already reported", with_traceback=False)
        for index, call in enumerate(parsed.calls):
            if call.name is None:
                break  # later calls wait for this one's name
            if index == len(self.sent_calls):
                call_id = new_call_id()
                self.sent_calls.append((call_id, call.name, call.arguments))
                deltas.append({"tool_calls": [{"index": index, **call_object(call_id, call)}]})
                continue
            call_id, name, sent = self.sent_calls[index]
            if call.name != name:
                raise self.reader.failure(f"it renamed call {index} from {name!r} to {call.name!r}", with_traceback=False)
            if call.arguments != sent:
                self._check_grows(sent, call.arguments, f"call {index}'s arguments")
                deltas.append({"tool_calls": [{"index": index, "function": {"arguments": call.arguments[len(sent):]}}]})
                self.sent_calls[index] = (call_id, name, call.arguments)
        return deltas

    def _check_grows(self, sent: str, now: str, what: str) -> None:
        # A stream cannot take back what it sent: a parser whose parses do not
        # only grow is a bug, reported rather than sent wrong.
        if not now.startswith(sent):
            raise self.reader.failure(f"it changed {what} after it was streamed", with_traceback=False)
