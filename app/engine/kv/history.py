"""Each conversation's exact tokens, so that its next turn's prompt keeps them instead of re-tokenizing.

Tokenizing a rendered chat need not give back the tokens the model generated (BPE is not unique:
" don't" may come back as " don" + "'t"); where it differs, the cached prefix ends early and the
rest of the history is computed again. So a later turn's prompt keeps the longest run of the
conversation's own tokens whose text starts the newly rendered prompt, and tokenizes only the rest.
"""

from __future__ import annotations

import codecs
from array import array
from collections import OrderedDict
from collections.abc import Callable, Sequence


class TokenHistory:
    """The tokens (prompt and reply) of each recent conversation's last request, least recent forgotten.

    Written by the engine thread when a request ends, read by the prompt thread: a conversation's
    entry is replaced whole, never changed in place.
    """

    def __init__(self, kept: int):
        self._kept = kept
        self._tokens: OrderedDict[str, array] = OrderedDict()

    def remember(self, conversation_id: str, tokens: Sequence[int]) -> None:
        self._tokens[conversation_id] = array("q", tokens)  # 8 bytes a token: a picture's placeholder ids are wide
        self._tokens.move_to_end(conversation_id)
        while len(self._tokens) > self._kept:
            self._tokens.popitem(last=False)

    def get(self, conversation_id: str | None) -> array | None:
        return None if conversation_id is None else self._tokens.get(conversation_id)

    def __len__(self) -> int:
        return len(self._tokens)


def kept_prefix(history: Sequence[int], text: bytes, lead: Sequence[int], spell: Callable[[int], bytes]) -> tuple[int, int]:
    """How many leading tokens of `history` spell the start of `text`, and how many bytes they spell.

    Tokens spell their bytes as the reply showed them: decoded as UTF-8, bytes that are no text
    becoming U+FFFD, as the text stream does (a sampled token can be a stray byte). `lead` are the
    tokens the tokenizer puts before any text (a BOS): they spell nothing. A token spelling nothing
    else ends the run (it would be invisible in the text), and the run ends only where no character
    is half read, so the rest of the text can be tokenized on its own.
    """
    n = len(lead) if lead and list(history[: len(lead)]) == list(lead) else 0
    start = n
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    kept, pos = (n, 0), 0
    for i, token in enumerate(history[start:], start + 1):
        if token < 0:  # a picture's placeholder: no text spells it (the prompt builder puts it back itself)
            break
        piece = spell(token)
        held = decoder.getstate()[0]
        shown = decoder.decode(piece).encode("utf-8")
        if not piece or not text.startswith(shown, pos):
            break
        if held and not 0x80 <= piece[0] <= 0xBF:  # the bytes held were no character: they end at token i-1
            kept = (i - 1, pos + len(held.decode("utf-8", errors="replace").encode("utf-8")))
        pos += len(shown)
        if not decoder.getstate()[0]:  # no character half read: a place the rest can start
            kept = (i, pos)
    return kept if kept[0] > start else (0, 0)
