from tercet.formats.pooling_spec import Pooling
from tercet.model_abilities import ModelAbilities


def test_abilities_survive_the_ready_report():
    encoder = ModelAbilities(can_generate=False, pooling=Pooling("mean", True, "modules.json"), embedding_size=384)
    assert ModelAbilities.from_dict(encoder.as_dict()) == encoder
    assert encoder.can_embed
    decoder = ModelAbilities(can_generate=True, pooling=None, embedding_size=576)
    assert ModelAbilities.from_dict(decoder.as_dict()) == decoder
    assert not decoder.can_embed


def test_a_report_without_abilities_is_a_decoder_that_only_generates():
    assert ModelAbilities.from_dict({"context_len": 2048}) == ModelAbilities(True, None, None)
