"""`Vocab`: a model's tokenizer: text to tokens, a token's bytes, the special texts, the end-of-generation tokens."""

from __future__ import annotations

import ctypes

import llama_cpp as ll


class Vocab:
    """llama.cpp's vocabulary of a loaded model, read once at the load. It does not change after it,
    so the prompt thread tokenizes (`tokenize`, `spell`) while the engine thread decodes."""

    def __init__(self, model):
        self._vocab = ll.llama_model_get_vocab(model)
        self._piece_buf = ctypes.create_string_buffer(256)
        self._pieces: dict[int, bytes] = {}
        self._spellings: dict[int, bytes] = {}
        self.bos_text = self._token_text(ll.llama_vocab_bos(self._vocab))
        self.eos_text = self._token_text(ll.llama_vocab_eos(self._vocab))
        self.special_texts = self._special_texts()
        self.n_vocab = ll.llama_vocab_n_tokens(self._vocab)
        self.eog_tokens = tuple(t for t in range(self.n_vocab) if ll.llama_vocab_is_eog(self._vocab, t))
        self._eog = frozenset(self.eog_tokens)

    @property
    def model_vocab(self):
        """llama.cpp's vocabulary handle (a grammar sampler reads it)."""
        return self._vocab

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """`text`'s tokens; `add_special`: with the model's BOS (if it adds one); `parse_special`:
        control-token texts (<|im_start|>) read as those tokens, else as plain text."""
        data = text.encode("utf-8")
        n_max = len(data) + 8
        buf = (ll.llama_token * n_max)()
        n = ll.llama_tokenize(self._vocab, data, len(data), buf, n_max, add_special, parse_special)
        if n < 0:
            buf = (ll.llama_token * -n)()
            n = ll.llama_tokenize(self._vocab, data, len(data), buf, -n, add_special, parse_special)
        return buf[:n]

    def detokenize(self, tokens: list[int]) -> str:
        """The text of `tokens`, control tokens written out (as llama-server's /detokenize); bytes
        that are not whole UTF-8 characters shown as U+FFFD."""
        return b"".join(self.spell(t) for t in tokens).decode("utf-8", errors="replace")

    def piece(self, token: int) -> bytes:
        """The bytes a token stands for (special tokens render as nothing), cached per token."""
        cached = self._pieces.get(token)
        if cached is None:
            n = ll.llama_token_to_piece(self._vocab, token, self._piece_buf, 256, 0, False)
            cached = self._piece_buf.raw[: max(n, 0)]
            self._pieces[token] = cached
        return cached

    def spell(self, token: int) -> bytes:
        """The bytes a token stands for, control tokens written out (<|im_end|>), as a chat template
        writes them; cached per token. Both the prompt thread and the engine thread (token
        probabilities) call it: a buffer of its own each call, unlike `piece`, engine thread only."""
        cached = self._spellings.get(token)
        if cached is None:
            buf = ctypes.create_string_buffer(256)
            n = ll.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, True)
            cached = self._spellings[token] = buf.raw[: max(n, 0)]
        return cached

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        n = ll.llama_token_to_piece(self._vocab, token, self._piece_buf, 256, 0, True)
        return self._piece_buf.raw[: max(n, 0)].decode("utf-8", errors="replace")

    def _special_texts(self) -> tuple[str, ...]:
        """The texts that tokenize as control tokens (such as <|im_start|>): markers of the chat format."""
        kinds = ll.LLAMA_TOKEN_ATTR_CONTROL | ll.LLAMA_TOKEN_ATTR_USER_DEFINED
        texts = set()
        for token in range(ll.llama_vocab_n_tokens(self._vocab)):
            if ll.llama_vocab_get_attr(self._vocab, token) & kinds:
                text = ll.llama_vocab_get_text(self._vocab, token).decode("utf-8", errors="replace")
                if text:
                    texts.add(text)
        return tuple(sorted(texts))

    def is_eog(self, token: int) -> bool:
        return token in self._eog
