"""Token bytes -> streamed text: whole UTF-8 characters only, and stop strings cut cleanly."""

from __future__ import annotations

import codecs


class TextStream:
    """Holds back a character split across tokens, and any tail that may begin a stop string."""

    def __init__(self, stop: tuple[str, ...] = ()):
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = tuple(s for s in stop if s)
        self._held = ""
        self._parts: list[str] = []
        self.stopped = False  # a stop string was found

    def feed(self, data: bytes) -> str:
        """Add one token's bytes; return the text that is now safe to show."""
        if self.stopped:
            return ""
        self._held += self._decoder.decode(data)
        return self._emit(self._release())

    def finish(self) -> str:
        """The end of generation: flush what was held (a broken character becomes U+FFFD)."""
        if self.stopped:
            return ""
        self._held += self._decoder.decode(b"", final=True)
        text = self._release()  # a stop string may sit in the very last bytes
        if not self.stopped:
            text += self._take(len(self._held))
        return self._emit(text)

    def _release(self) -> str:
        if not self._stop:
            return self._take(len(self._held))
        cut = min((i for i in (self._held.find(s) for s in self._stop) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            text = self._held[:cut]
            self._held = ""
            return text
        return self._take(len(self._held) - self._stop_prefix_len())

    def _stop_prefix_len(self) -> int:
        """Length of the longest tail of the held text that starts some stop string."""
        held = self._held
        best = 0
        for s in self._stop:
            for n in range(min(len(s) - 1, len(held)), best, -1):
                if held.endswith(s[:n]):
                    best = n
                    break
        return best

    def _take(self, n: int) -> str:
        text, self._held = self._held[:n], self._held[n:]
        return text

    def _emit(self, text: str) -> str:
        if text:
            self._parts.append(text)
        return text

    @property
    def text(self) -> str:
        """Everything emitted so far."""
        return "".join(self._parts)
