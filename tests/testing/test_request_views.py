import pytest

from tercet.plugin_api import RequestView, SamplingParams
from tercet.testing import make_request_view


def test_the_view_holds_what_was_given():
    view = make_request_view("r1", 4, [7, 8], output_ids=[9], max_new_tokens=16, priority=2, tenant="acme")
    assert isinstance(view, RequestView)
    assert (view.rid, view.arrival_index, view.priority, view.tenant) == ("r1", 4, 2, "acme")
    assert view.input_ids == (7, 8) and view.output_ids == (9,) and view.all_token_ids == (7, 8, 9)
    assert view.sampling_params.max_new_tokens == 16
    assert view.num_tokens == 3 and view.num_completions == 1


def test_defaults_and_sampling_params():
    params = SamplingParams(max_new_tokens=3, temperature=0.0)
    view = make_request_view("r2", sampling_params=params)
    assert view.arrival_index == 0 and view.input_ids == (1, 2, 3) and view.output_ids == ()
    assert view.sampling_params is params
    assert view.priority == 0 and view.tenant is None


def test_the_view_cannot_be_changed():
    view = make_request_view("r3")
    with pytest.raises(AttributeError):
        view.priority = 5
    with pytest.raises(AttributeError):
        view.output_ids.append(1)


def test_sampling_params_and_max_new_tokens_together_is_an_error():
    with pytest.raises(ValueError, match="not both"):
        make_request_view("r4", sampling_params=SamplingParams(), max_new_tokens=2)
