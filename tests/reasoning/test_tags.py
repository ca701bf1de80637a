"""Reasoning between tags: the split of a whole completion, and the same split whatever the pieces."""

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from tercet.reasoning.parser import ReasoningPiece, split_reasoning
from tercet.reasoning.tags import TaggedReasoningParser

START, END = "<think>", "</think>"
THINK = TaggedReasoningParser(START, END)
INSIDE = TaggedReasoningParser(START, END, starts_inside=True)


def reference_split(text: str, starts_inside: bool) -> ReasoningPiece:
    """The rules of tercet.reasoning.tags, written plainly over the whole text."""
    reasoning, content = [], []
    if starts_inside:
        text = START + text
    elif text.lstrip().startswith(START):
        text = text.lstrip()
    position = 0
    for match in re.finditer(rf"{re.escape(START)}(.*?)(?:{re.escape(END)}|\Z)|{re.escape(END)}", text, re.DOTALL):
        content.append(text[position:match.start()])
        position = match.end()
        if match.group(0).startswith(START):
            reasoning.append(match.group(1))
        if match.group(0).endswith(END):
            # Whitespace after an end tag is dropped.
            position = len(text) - len(text[position:].lstrip()) if text[position:].strip() else len(text)
    content.append(text[position:])
    return ReasoningPiece("".join(reasoning), "".join(content))


def streamed(parser, pieces: list[str]) -> tuple[ReasoningPiece, list[ReasoningPiece]]:
    stream = parser.stream()
    parts = [stream.feed(piece) for piece in pieces] + [stream.finish()]
    whole = ReasoningPiece()
    for part in parts:
        whole = whole + part
    return whole, parts


def test_reasoning_then_answer():
    assert split_reasoning(THINK, "<think>Two and two.</think>\n\nFour.") == ReasoningPiece("Two and two.", "Four.")
    assert split_reasoning(THINK, "\n<think>a</think>b") == ReasoningPiece("a", "b")
    assert split_reasoning(THINK, "No reasoning here.") == ReasoningPiece("", "No reasoning here.")
    assert split_reasoning(THINK, "<think>cut off by max_tokens") == ReasoningPiece("cut off by max_tokens", "")


def test_a_model_that_starts_inside_writes_only_the_end_tag():
    assert split_reasoning(INSIDE, "Two and two.</think>Four.") == ReasoningPiece("Two and two.", "Four.")
    assert split_reasoning(INSIDE, "still thinking") == ReasoningPiece("still thinking", "")
    assert INSIDE.frame.start == "" and THINK.frame.start == START and THINK.frame.end == END


def test_stray_tags_and_partial_tags():
    assert split_reasoning(THINK, "a</think> b") == ReasoningPiece("", "ab")
    assert split_reasoning(THINK, "a <thin b") == ReasoningPiece("", "a <thin b")
    assert split_reasoning(THINK, "ends with </thi") == ReasoningPiece("", "ends with </thi")
    assert split_reasoning(THINK, "<think>x</thi") == ReasoningPiece("x</thi", "")


def test_a_piece_holds_back_only_what_may_become_a_tag():
    stream = THINK.stream()
    assert stream.feed("<thi") == ReasoningPiece()
    assert stream.feed("nk>Let me see") == ReasoningPiece("Let me see", "")
    assert stream.feed(" </") == ReasoningPiece(" ", "")
    assert stream.feed("think>\n") == ReasoningPiece()
    assert stream.feed("\nYes <") == ReasoningPiece("", "Yes ")
    assert stream.feed("b>") == ReasoningPiece("", "<b>")
    assert stream.finish() == ReasoningPiece()


# Words of three kinds: content, reasoning, and fragments of the tags, split anywhere.
CONTENT_WORDS = st.sampled_from(["an", "swer", " ", "\n", "<", "</", "<b>", "think", ">"])
REASONING_WORDS = st.sampled_from(["WE", "IGH", " ", "\n", "<", "</", "<thin", "</thin", START])


@st.composite
def completions(draw):
    """A completion of content and reasoning blocks; content has only lowercase letters, reasoning only capitals."""
    parts = []
    for _ in range(draw(st.integers(0, 4))):
        parts.append("".join(draw(st.lists(CONTENT_WORDS, max_size=6))))
        reasoning = "".join(draw(st.lists(REASONING_WORDS, max_size=6)))
        parts.append(START + reasoning.replace(END, "") + draw(st.sampled_from([END, END, ""])))
    parts.append("".join(draw(st.lists(CONTENT_WORDS, max_size=6))))
    text = "".join(parts)
    # A closing tag left out ends the reasoning at the end only: cut the text there.
    first_open_unclosed = re.search(f"{re.escape(START)}(?:(?!{re.escape(END)}).)*{re.escape(START)}", text, re.DOTALL)
    return text if first_open_unclosed is None else text[:first_open_unclosed.end()]


@st.composite
def splits(draw, text: str):
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=12)))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]


@settings(max_examples=400, deadline=None)
@given(st.data(), st.booleans())
def test_no_tag_or_reasoning_reaches_content_whatever_the_pieces(data, starts_inside):
    text = data.draw(completions())
    if starts_inside:  # the completion starts with reasoning, closed or not
        text = "".join(data.draw(st.lists(REASONING_WORDS, max_size=4))).replace(START, "") + END + text
    pieces = data.draw(splits(text))
    parser = INSIDE if starts_inside else THINK
    whole, parts = streamed(parser, pieces)
    assert whole == split_reasoning(parser, text) == reference_split(text, starts_inside)
    for part in parts:
        assert not re.search("[A-Z]", part.content), (pieces, part)
    # No tag as the text wrote it reaches the content: each stretch of content between two
    # reasoning blocks is tag-free (joined, "<" + a block + "think>" may spell one again).
    for stretch in re.split(f"{re.escape(START)}.*?(?:{re.escape(END)}|$)", text, flags=re.DOTALL):
        if START not in stretch and END not in stretch:
            assert stretch.strip() == "" or stretch.strip() in whole.content
    assert END not in whole.reasoning
