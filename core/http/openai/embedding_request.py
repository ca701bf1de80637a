"""``POST /v1/embeddings`` bodies in: OpenAI's fields, checked, as an :class:`EmbeddingRequest`.

``input`` is a string, a list of token ids, a list of strings or a list of
token-id lists; each string or id list is embedded whole, as one vector (a
text with the model's special tokens, as sentence-transformers encodes it;
token ids exactly as sent). An empty input, or one longer than the model
takes, is a 400: nothing is cut short. ``encoding_format`` is ``float`` (the
default) or ``base64`` (the little-endian float32 bytes, as OpenAI sends).
``dimensions`` is accepted when it is the model's own size: no model tercet
serves says it was trained for shortened (Matryoshka) embeddings, and cutting
one that was not gives vectors that are not embeddings of anything. Unknown
fields are ignored, as on the other OpenAI routes.
"""

from __future__ import annotations

from dataclasses import dataclass

from tercet.errors import RequestError
from tercet.field_checks import check_text, is_integer, shown
from tercet.frontend.io_struct import EmbeddingRequest
from tercet.http.openai.openai_request import check_model
from tercet.http.sampling_fields import parse_token_ids

ENCODING_FORMATS = ("float", "base64")
INPUT_SHAPES = "a string, a list of token ids, a list of strings or a list of token-id lists"


@dataclass(frozen=True)
class OpenAIEmbeddingRequest:
    model: str
    embedding_request: EmbeddingRequest
    encoding_format: str = "float"


def parse_embedding_request(body: dict, served_model_name: str, vocab_size: int | None,
                            embedding_size: int | None) -> OpenAIEmbeddingRequest:
    model = check_model(body, served_model_name)
    inputs, is_list = parse_input(body.get("input"), vocab_size)
    encoding_format = body.get("encoding_format")
    if encoding_format is None:
        encoding_format = "float"
    if encoding_format not in ENCODING_FORMATS:
        raise RequestError(
            f"encoding_format must be one of {', '.join(ENCODING_FORMATS)}, got {shown(encoding_format)}", "encoding_format"
        )
    check_dimensions(body.get("dimensions"), embedding_size)
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise RequestError(f"user must be a string, got {shown(user)}", "user")
    return OpenAIEmbeddingRequest(model, EmbeddingRequest(inputs, is_list), encoding_format)


def parse_input(value, vocab_size: int | None) -> tuple[list[str] | list[list[int]], bool]:
    """The inputs, and whether they came as a list (so an error about one names its position)."""
    if value is None:
        raise RequestError("input is required", "input")
    if isinstance(value, str):
        return [_text(value, "input")], False
    if not isinstance(value, list) or not value:
        raise RequestError(f"input must be {INPUT_SHAPES}; a list must be non-empty", "input")
    if all(is_integer(item) for item in value):
        return [list(parse_token_ids(value, "input", vocab_size))], False
    return _input_list(value, vocab_size), True


def _input_list(value: list, vocab_size: int | None) -> list[str] | list[list[int]]:
    """A list of strings or of token-id lists, one input each."""
    if all(isinstance(item, str) for item in value):
        return [_text(text, f"input[{index}]") for index, text in enumerate(value)]
    if all(isinstance(item, list) for item in value):
        return [list(parse_token_ids(ids, f"input[{index}]", vocab_size)) for index, ids in enumerate(value)]
    raise RequestError(f"input must be {INPUT_SHAPES} (one list may not mix strings and token ids)", "input")


def check_dimensions(dimensions, embedding_size: int | None) -> None:
    if dimensions is None:
        return
    if not is_integer(dimensions) or dimensions < 1:
        raise RequestError(f"dimensions must be a positive integer, got {shown(dimensions)}", "dimensions")
    if dimensions != embedding_size:
        raise RequestError(
            f"dimensions={dimensions}: this model's embeddings have {embedding_size} dimensions and it was not "
            f"trained for shortened (Matryoshka) embeddings; leave dimensions out or send {embedding_size}",
            "dimensions",
        )


def _text(text: str, name: str) -> str:
    if not text:
        raise RequestError(f"{name} is an empty string: there is nothing to embed", name)
    check_text(text, name)
    return text
