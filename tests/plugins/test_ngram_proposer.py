"""The ngram proposer: the continuation of the longest suffix found earlier in the request."""

from __future__ import annotations

import pytest

from tercet.config import TercetConfig
from tercet.errors import ConfigError
from tercet.plugin_api import DraftRequest
from tercet.plugins.ngram_proposer import NgramProposer, continuation_of_longest_suffix


def test_the_longest_suffix_wins_over_a_later_shorter_one():
    #            a  b  c  X  Y  .  c  Z  .  a  b  c
    tokens = [1, 2, 3, 50, 51, 0, 3, 60, 0, 1, 2, 3]
    assert continuation_of_longest_suffix(tokens, 1, 3, 2) == [50, 51]
    # With only one-token suffixes looked up, the latest "c" wins.
    assert continuation_of_longest_suffix(tokens, 1, 1, 2) == [60, 0]


def test_no_occurrence_no_drafts_and_never_the_suffix_itself():
    assert continuation_of_longest_suffix([1, 2, 3, 4], 1, 3, 4) == []
    assert continuation_of_longest_suffix([7], 1, 3, 4) == []
    # Shorter than min_n: nothing is looked up.
    assert continuation_of_longest_suffix([5, 6, 5, 6], 3, 3, 4) == []


def test_a_match_across_token_boundaries_is_not_taken():
    # As 32-bit little-endian integers, 256 then 0 hold the bytes of 1 one byte in: a later,
    # unaligned occurrence of the suffix [1] that must be passed over for the token at 0.
    tokens = [1, 7, 256, 0, 9, 1]
    assert continuation_of_longest_suffix(tokens, 1, 1, 1) == [7]


def test_drafts_stop_at_max_drafts_and_at_the_end():
    tokens = [4, 5, 6, 7, 8, 4, 5]
    assert continuation_of_longest_suffix(tokens, 1, 2, 2) == [6, 7]
    assert continuation_of_longest_suffix([4, 5, 4], 1, 2, 8) == [5, 4]


def test_the_proposer_reads_its_sizes_from_the_config_and_refuses_min_over_max():
    config = TercetConfig().replace("speculative", ngram_min=2, ngram_max=2)
    proposer = NgramProposer(config)
    request = DraftRequest("r", (1, 2, 3, 9, 2, 3), num_prompt_tokens=4, max_drafts=3)
    assert proposer.propose([request]) == [[9, 2, 3]]
    with pytest.raises(ConfigError, match="speculative.ngram_min"):
        NgramProposer(TercetConfig().replace("speculative", ngram_min=5, ngram_max=2))
