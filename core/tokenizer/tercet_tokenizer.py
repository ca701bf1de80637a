"""The tokenizer the server uses: a ``tokenizers.Tokenizer``, its special tokens and its chat template.

It offers the part of the Hugging Face tokenizer interface tercet uses, with
the same results as ``transformers.AutoTokenizer`` (5.x) on the same files,
but needs neither transformers nor torch, so the API and detokenizer
processes stay small. It is built by :func:`tercet.tokenizer.loading.load_tokenizer`
from a checkpoint directory or a GGUF file.

``encode`` and ``decode`` go straight to the Rust tokenizer, which releases
the GIL and may be called from several threads at once.
"""

from __future__ import annotations

from tokenizers import Tokenizer

# The named special tokens every tokenizer may have, in the order Hugging Face lists them.
STANDARD_SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
# What ``clean_up_tokenization_spaces`` undoes: the spaces WordPiece-era
# decoders put before punctuation and contractions.
TOKENIZATION_SPACES = (
    (" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
    (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"),
)


class TercetTokenizer:
    """Text <-> token ids, and conversations -> prompts.

    ``special_tokens`` maps each named special token (``bos_token``,
    ``eos_token``, ... and model-specific ones such as ``image_token``) to its
    text; they are also attributes (``tokenizer.eos_token``, with
    ``tokenizer.eos_token_id``), None when the model has none.
    """

    def __init__(
        self,
        backend: Tokenizer,
        *,
        name_or_path: str,
        special_tokens: dict[str, str | None] | None = None,
        extra_special_tokens: tuple[str, ...] = (),
        chat_template: str | dict[str, str] | None = None,
        clean_up_tokenization_spaces: bool = False,
    ):
        self.backend_tokenizer = backend
        self.name_or_path = name_or_path
        self.special_tokens = {name: text for name, text in (special_tokens or {}).items() if text is not None}
        self.extra_special_tokens = tuple(extra_special_tokens)
        self.chat_template = chat_template
        # Only for WordPiece-like models: on BPE the clean-up would eat real
        # spaces before punctuation, so transformers skips it there too.
        self.clean_up_tokenization_spaces = clean_up_tokenization_spaces and not _is_bpe(backend)
        self.all_special_tokens = _unique([*self._named_in_order(), *self.extra_special_tokens])
        self.all_special_ids = [self.convert_tokens_to_ids(token) for token in self.all_special_tokens]

    # -- text <-> ids -----------------------------------------------------------

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.backend_tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, token_ids: int | list[int], skip_special_tokens: bool = False) -> str:
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        elif not isinstance(token_ids, list):
            token_ids = list(token_ids)
        text = self.backend_tokenizer.decode(token_ids, skip_special_tokens=skip_special_tokens)
        if self.clean_up_tokenization_spaces:
            for spaced, joined in TOKENIZATION_SPACES:
                text = text.replace(spaced, joined)
        return text

    def convert_ids_to_tokens(self, ids: int | list[int], skip_special_tokens: bool = False) -> str | list[str]:
        """Each id's token as the vocabulary spells it (``Ġ`` for a byte-level space); None past the vocabulary."""
        if isinstance(ids, int):
            return self.backend_tokenizer.id_to_token(ids)
        skipped = set(self.all_special_ids) if skip_special_tokens else ()
        return [self.backend_tokenizer.id_to_token(int(i)) for i in ids if int(i) not in skipped]

    def convert_tokens_to_ids(self, tokens: str | list[str]) -> int | None | list[int | None]:
        """Each token's id; the unknown token's id for one not in the vocabulary."""
        if isinstance(tokens, str):
            found = self.backend_tokenizer.token_to_id(tokens)
            return found if found is not None else self.unk_token_id
        return [self.convert_tokens_to_ids(token) for token in tokens]

    # -- vocabulary -------------------------------------------------------------

    def __len__(self) -> int:
        """Ids in use, added tokens included."""
        return self.backend_tokenizer.get_vocab_size(with_added_tokens=True)

    @property
    def vocab_size(self) -> int:
        """The base vocabulary's size, without added tokens."""
        return self.backend_tokenizer.get_vocab_size(with_added_tokens=False)

    def get_vocab(self) -> dict[str, int]:
        """Every token (added ones included) -> its id."""
        return self.backend_tokenizer.get_vocab(with_added_tokens=True)

    def get_added_vocab(self) -> dict[str, int]:
        """Tokens added on top of the model's vocabulary (special or not), in id order."""
        decoder = self.backend_tokenizer.get_added_tokens_decoder()
        return {decoder[token_id].content: token_id for token_id in sorted(decoder)}

    @property
    def special_tokens_map(self) -> dict[str, str]:
        return dict(self.special_tokens)

    def __getattr__(self, name: str):
        # Only reached for attributes not set in __init__: the named special tokens and their ids.
        special_tokens = self.__dict__.get("special_tokens")
        if special_tokens is not None:
            if name in special_tokens or name in STANDARD_SPECIAL_TOKENS:
                return special_tokens.get(name)
            token_name = name.removesuffix("_id")
            if name.endswith("_token_id") and (token_name in special_tokens or token_name in STANDARD_SPECIAL_TOKENS):
                text = special_tokens.get(token_name)
                return None if text is None else self.convert_tokens_to_ids(text)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # -- chat -------------------------------------------------------------------

    def apply_chat_template(
        self,
        conversation: list[dict],
        tools: list[dict] | None = None,
        documents: list[dict] | None = None,
        chat_template: str | None = None,
        add_generation_prompt: bool = False,
        tokenize: bool = True,
        return_dict: bool = False,
        **template_variables,
    ) -> str | list[int] | dict[str, list[int]]:
        """The conversation rendered by the chat template: its text (``tokenize=False``), its token ids,
        or with ``return_dict`` ``{"input_ids", "attention_mask"}``.

        The template sees the special tokens (``bos_token``, ...) and any
        ``template_variables``, which take precedence. The text is tokenized
        without adding special tokens: the template writes them itself.
        """
        # Imported here: Jinja2 costs some 7 MB, and only the API process renders templates.
        from tercet.tokenizer.chat_template import choose_chat_template, render_chat

        template = choose_chat_template(self.chat_template, chat_template, tools)
        text = render_chat(
            template, conversation, add_generation_prompt=add_generation_prompt, tools=tools, documents=documents,
            variables={**self.special_tokens, **template_variables},
        )
        if not tokenize:
            return text
        input_ids = self.encode(text, add_special_tokens=False)
        if return_dict:
            return {"input_ids": input_ids, "attention_mask": [1] * len(input_ids)}
        return input_ids

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name_or_path={self.name_or_path!r}, vocab={len(self)})"

    def _named_in_order(self) -> list[str]:
        standard = [self.special_tokens[name] for name in STANDARD_SPECIAL_TOKENS if name in self.special_tokens]
        specific = [text for name, text in self.special_tokens.items() if name not in STANDARD_SPECIAL_TOKENS]
        return standard + specific


def _unique(texts: list[str]) -> list[str]:
    return list(dict.fromkeys(texts))


def _is_bpe(backend: Tokenizer) -> bool:
    return type(backend.model).__name__ == "BPE"
