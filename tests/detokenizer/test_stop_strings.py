import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tercet.detokenizer.stop_strings import StopStringFilter


def cut_at_first_stop(text: str, stop: list[str], no_stop_trim: bool) -> str:
    """The reference: the earliest occurrence wins, the shortest of those starting together."""
    found = [(text.find(s), len(s)) for s in stop if s and s in text]
    if not found:
        return text
    start, length = min(found)
    return text[: start + length] if no_stop_trim else text[:start]


def run(stop, deltas, no_stop_trim=False):
    stop_filter = StopStringFilter(stop, no_stop_trim)
    pieces = [stop_filter.feed(delta) for delta in deltas]
    pieces.append(stop_filter.flush())
    return pieces


def test_without_a_match_everything_passes_at_once():
    assert run(["STOP"], ["Hello", " world"]) == ["Hello", " world", ""]


def test_the_stop_string_and_everything_after_it_are_dropped():
    assert run(["STOP"], ["one STOP two", " three"]) == ["one ", "", ""]


def test_no_stop_trim_keeps_the_stop_string_but_nothing_after():
    assert run(["STOP"], ["one STOP two", " three"], no_stop_trim=True) == ["one STOP", "", ""]


def test_a_stop_string_split_across_deltas_is_never_shown_in_part():
    assert run(["STOP"], ["one S", "T", "OP two"]) == ["one ", "", "", ""]
    assert run(["STOP"], ["one S", "T", "OP two"], no_stop_trim=True) == ["one ", "", "STOP", ""]


def test_held_back_text_is_released_once_it_cannot_match():
    assert run(["STOP"], ["one ST", "ART"]) == ["one ", "START", ""]


def test_held_back_text_is_released_at_the_end():
    assert run(["STOP"], ["one ST"]) == ["one ", "ST"]


def test_earliest_match_wins():
    assert "".join(run(["later", "early"], ["an early and a later one"])) == "an "
    assert "".join(run(["later", "early"], ["an early and a later one"], no_stop_trim=True)) == "an early"


def test_a_longer_stop_string_that_starts_earlier_is_awaited():
    # "b" matched, but "abc" starts earlier and may still complete.
    stop_filter = StopStringFilter(["abc", "b"], no_stop_trim=False)
    assert stop_filter.feed("xab") == "x"
    assert stop_filter.feed("c") == ""
    assert stop_filter.flush() == ""
    assert run(["abc", "b"], ["xab"]) == ["x", "a"]
    assert run(["abc", "b"], ["xab", "d"]) == ["x", "a", ""]


def test_the_shortest_of_stop_strings_starting_together_wins():
    assert "".join(run(["abc", "ab"], ["xabcd"], no_stop_trim=True)) == "xab"


def test_after_a_match_nothing_more_comes():
    stop_filter = StopStringFilter(["."], no_stop_trim=False)
    assert stop_filter.feed("Hi. There") == "Hi"
    assert stop_filter.is_stopped
    assert stop_filter.feed("more.") == ""
    assert stop_filter.flush() == ""


def test_empty_stop_strings_never_match():
    assert run(["", "Z"], ["abc"]) == ["abc", ""]


@pytest.mark.parametrize("no_stop_trim", [False, True])
def test_unicode_stop_strings(no_stop_trim):
    text = "日本語のテキスト🙂と中文"
    deltas = list(text)
    assert "".join(run(["🙂と"], deltas, no_stop_trim)) == cut_at_first_stop(text, ["🙂と"], no_stop_trim)


ALPHABET = "ab🙂\ufffd "


@st.composite
def texts_stops_and_splits(draw):
    text = draw(st.text(alphabet=ALPHABET, max_size=30))
    substrings = st.builds(
        lambda i, n: text[i : i + n], st.integers(0, max(len(text) - 1, 0)), st.integers(1, 5)
    )
    stop = draw(st.lists(st.one_of(substrings, st.text(alphabet=ALPHABET, min_size=1, max_size=4)), max_size=4))
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=8)))
    bounds = [0, *cuts, len(text)]
    deltas = [text[a:b] for a, b in zip(bounds, bounds[1:])]
    return text, stop, deltas


@settings(max_examples=100, deadline=None)
@given(case=texts_stops_and_splits(), no_stop_trim=st.booleans())
def test_any_split_gives_the_text_cut_at_the_first_stop(case, no_stop_trim):
    text, stop, deltas = case
    expected = cut_at_first_stop(text, stop, no_stop_trim)
    stop_filter = StopStringFilter(stop, no_stop_trim)
    shown, received = "", ""
    for delta in deltas:
        received += delta
        shown += stop_filter.feed(delta)
        matched = cut_at_first_stop(received, stop, no_stop_trim) != received
        if not matched:
            # Only a tail that may still become a stop string is held back...
            held = received[len(shown):]
            assert received.startswith(shown)
            assert held == "" or any(s.startswith(held) and s != held for s in stop)
        # ...and no part of the eventual match is shown before it is complete.
        start = len(cut_at_first_stop(text, stop, False))
        assert len(shown) <= start or shown == expected
    shown += stop_filter.flush()
    assert shown == expected
