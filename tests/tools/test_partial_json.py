import json

from hypothesis import given, settings
from hypothesis import strategies as st

from tercet.tools.partial_json import ObjectScanner, ValueEnd, scan_object, value_end

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8,
)


def test_members_of_a_finished_object_are_its_values_as_written():
    text = '{"name": "get_weather", "arguments": {"city": "Pa\\"ris", "days": [1, 2]}, "n": 3}'
    scan = scan_object(text)
    assert scan.valid and scan.end == len(text)
    assert scan.members["name"].text(text) == '"get_weather"'
    assert scan.members["arguments"].text(text) == '{"city": "Pa\\"ris", "days": [1, 2]}'
    assert scan.members["n"].text(text) == "3"


def test_an_unfinished_value_runs_to_the_end_of_the_text():
    text = '{"name": "f", "arguments": {"city": "Par'
    scan = scan_object(text)
    assert scan.valid and scan.end is None
    assert scan.members["arguments"].end is None
    assert scan.members["arguments"].text(text) == '{"city": "Par'
    # A number at the very end may still grow: not finished.
    assert scan_object('{"n": 12').members["n"].end is None
    assert value_end('"a\\"}"', 0) == 6  # an escaped quote and brace inside a string


def test_text_that_cannot_be_an_object_is_invalid():
    for text in ('[1]', 'x{', '{"a" 1}', '{1: 2}', '{"a": 1 "b": 2}', '{,"a": 1}'):
        assert not scan_object(text).valid, text
    assert scan_object("  ").valid and scan_object("").members == {}


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=4), st.booleans())
def test_every_prefix_agrees_with_the_whole(obj, compact):
    text = json.dumps(obj, separators=(",", ":") if compact else None)
    whole = scan_object(text)
    assert whole.valid and whole.end == len(text)
    assert {key: json.loads(span.text(text)) for key, span in whole.members.items()} == obj
    for cut in range(len(text)):
        prefix = text[:cut]
        scan = scan_object(prefix)
        assert scan.valid and scan.end is None
        for key, span in scan.members.items():
            # What a prefix reports of a member is the start of its finished value.
            assert whole.members[key].start == span.start
            assert whole.members[key].text(text).startswith(span.text(prefix))
            if span.end is not None:
                assert span.end == whole.members[key].end


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=4), st.booleans(), st.lists(st.integers(0, 9), max_size=30))
def test_a_scanner_fed_a_growing_text_answers_as_scanning_it_whole(obj, compact, cuts):
    text = json.dumps(obj, separators=(",", ":") if compact else None) + ' {"after": 1}'
    scanner = ObjectScanner()
    length = 0
    for step in [*cuts, len(text)]:
        length = min(len(text), length + step)
        assert scanner.scan(text[:length]) == scan_object(text[:length])
    # An escape cut in two: the escaped character arrives with the next piece.
    value = ValueEnd(0)
    assert value.find('"a\\') is None and value.find('"a\\"') is None and value.find('"a\\""') == 5
