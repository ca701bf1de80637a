"""Tool calls out: ``message.tool_calls`` in a chat answer, ``tool_calls`` deltas in a stream.

A :class:`ToolCallReader` is one request's way of finding calls: the
configured parser for ``tool_choice`` "auto", or the bare call object for a
forced call. A parser that raises fails that request alone with a 500,
counted against its plugin. :class:`ToolCallDeltas` turns one streamed
completion into OpenAI's deltas: content as it becomes certain, then for
each call a first delta with its id, type and name, and its arguments as
they are written.
"""

from __future__ import annotations

import uuid

from tercet.containment import ContainedFailures
from tercet.errors import RequestError
from tercet.messages import FinishReason
from tercet.tool_calls import ToolCall, ToolCallParse, ToolCallParser, read_call_object

PARSER_FAILURE = "tool_call_parser"


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


class ToolCallReader:
    def __init__(
        self,
        parser: ToolCallParser | None,
        max_calls: int | None = None,
        failures: ContainedFailures | None = None,
        plugin_name: str | None = None,
    ):
        """``parser`` None reads a forced call: the whole text is one call object."""
        self.parser = parser
        self.max_calls = max_calls
        self.failures = failures
        self.plugin_name = plugin_name

    def parse(self, text: str, final: bool) -> ToolCallParse:
        if self.parser is None:
            parsed = _forced_call(text, final)
        else:
            try:
                parsed = self.parser.parse(text, final)
                if not isinstance(parsed, ToolCallParse):
                    raise TypeError(f"parse returned {type(parsed).__name__}, not a ToolCallParse")
            except Exception:
                raise self.failure("the tool-call parser failed") from None
        if self.max_calls is not None and len(parsed.calls) > self.max_calls:
            parsed = ToolCallParse(parsed.content, parsed.calls[: self.max_calls])
        return parsed

    def failure(self, description: str, with_traceback: bool = True) -> RequestError:
        """The 500 for a parser that failed, counted against its plugin (raise it)."""
        if self.failures is not None:
            self.failures.record(PARSER_FAILURE, description, self.plugin_name, with_traceback)
        return RequestError(
            f"the tool-call parser (plugin {self.plugin_name!r}) failed on this answer: {description}; "
            "the server log has the details", None, 500,
        )

    def message(self, text: str) -> dict:
        """The assistant message of a whole answer."""
        parsed = self.parse(text, final=True)
        calls = [call for call in parsed.calls if call.name is not None]
        if not calls:
            return {"role": "assistant", "content": parsed.content}
        return {
            "role": "assistant",
            "content": parsed.content or None,
            "tool_calls": [_call_object(new_call_id(), call) for call in calls],
        }


def _forced_call(text: str, final: bool) -> ToolCallParse:
    call = read_call_object(text)
    if call is None:
        # Only when the length limit cut the call before its name was done.
        return ToolCallParse(text if final else "")
    return ToolCallParse("", (call,))


def finish_reason_with_calls(finish_reason: FinishReason | None, has_calls: bool) -> str | None:
    """OpenAI's finish reason: "tool_calls" for an answer that ended by calling."""
    if finish_reason is None:
        return None
    if has_calls and finish_reason.kind == "stop":
        return "tool_calls"
    return finish_reason.kind


def _call_object(call_id: str, call: ToolCall) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


class ToolCallDeltas:
    """One streamed completion's text, sent as content and tool-call deltas."""

    def __init__(self, reader: ToolCallReader):
        self.reader = reader
        self.text = ""
        self.sent_content = ""
        self.sent_calls: list[tuple[str, str, str]] = []  # (id, name, arguments sent)

    @property
    def has_calls(self) -> bool:
        return bool(self.sent_calls)

    def add(self, text: str, final: bool) -> list[dict]:
        """The deltas that ``text``, the completion's next piece, makes certain."""
        self.text += text
        parsed = self.reader.parse(self.text, final)
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
                deltas.append({"tool_calls": [{"index": index, **_call_object(call_id, call)}]})
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
