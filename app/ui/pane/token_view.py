"""A reply drawn token by token, each tinted by how likely it was, with its rivals on hover.

Each token is a link (`tok:<message>:<index>`), so the transcript can tell which one the pointer is
over (its rivals in a tooltip) or was clicked (branch from a rival). The tint blends the
background towards red as the token's probability falls, keeping the text readable in any palette.
"""

from __future__ import annotations

import codecs
import html
import math

from PySide6.QtGui import QColor

from app.engine.probs import TokenProbs
from app.ui.theme import Theme, blend, contrast

SCHEME = "tok"
UNLIKELY = QColor("#e53935")  # the tint of a token the model thought unlikely
MAX_TINT = 0.45  # the strongest tint: text on it keeps a contrast of 4.5 in the light and dark palettes


def token_texts(probs: list[TokenProbs]) -> list[str]:
    """Each token's text as the reply shows it: a character split across tokens goes with its last piece."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    return [decoder.decode(p.chosen.piece) for p in probs]


def tint(p: float, colours: Theme) -> QColor:
    """The background of a token drawn with probability `p` (under the model)."""
    share = MAX_TINT * (1 - p) ** 2  # a likely token is barely tinted; doubt shows from about 50%
    colour = blend(colours.base, UNLIKELY, share)
    return colour if contrast(colour, colours.text) >= 4.5 else blend(colours.base, UNLIKELY, share / 2)


def tokens_html(message: int, probs: list[TokenProbs], colours: Theme, reply: str | None = None) -> str:
    """The reply as tinted token links; line breaks kept. `reply`, the reply's text, cuts the tokens
    where it ends (a stop string's tokens are not part of it)."""
    parts, left = [], len(reply) if reply is not None else None
    for i, (text, p) in enumerate(zip(token_texts(probs), probs)):
        if left is not None:
            text, left = text[: max(left, 0)], left - len(text)
        if not text:
            continue
        shown = html.escape(text).replace("\n", "<br>")
        background = tint(math.exp(p.chosen.logprob), colours).name()
        parts.append(
            f'<a href="{SCHEME}:{message}:{i}" style="background-color:{background}; color:{colours.text.name()};'
            f' text-decoration:none">{shown}</a>'
        )
    return "".join(parts)


def token_at(href: str) -> tuple[int, int] | None:
    """(message, token index) of a token link; None for any other link."""
    scheme, _, rest = href.partition(":")
    message, _, index = rest.partition(":")
    if scheme != SCHEME or not (message.isdigit() and index.isdigit()):
        return None
    return int(message), int(index)


def rivals_html(probs: TokenProbs) -> str:
    """A small table: the likeliest tokens there, under the model and after the pane's samplers."""
    rows = [
        f"<tr><td>{'▶ ' if c.token == probs.chosen.token else ''}{_shown(c.text)}</td>"
        f"<td align=right>{_pct(math.exp(c.logprob))}</td><td align=right>{_pct(c.sampled_p)}</td></tr>"
        for c in probs.top
    ]
    if probs.chosen.token not in {c.token for c in probs.top}:
        c = probs.chosen
        rows.append(
            f"<tr><td>▶ {_shown(c.text)}</td><td align=right>{_pct(math.exp(c.logprob))}</td><td align=right>{_pct(c.sampled_p)}</td></tr>"
        )
    head = "<tr><th align=left>token</th><th>model</th><th>after samplers</th></tr>"
    return f"<table cellspacing=4>{head}{''.join(rows)}</table>"


def _shown(text: str) -> str:
    """A token as text, its spaces and line breaks made visible."""
    return html.escape(repr(text)[1:-1]).replace(" ", "␣") or "∅"


def _pct(p: float) -> str:
    return f"{100 * p:.1f}%" if p >= 0.001 else ("0%" if p == 0 else "<0.1%")
