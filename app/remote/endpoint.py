"""A remote OpenAI-compatible endpoint: where it is, how it is asked, and what one reply may take."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from app.loopback import is_loopback


class RemoteError(Exception):
    """The endpoint could not give a reply; the message says why."""


@dataclass(frozen=True)
class Endpoint:
    base_url: str  # e.g. http://host:8080/v1 (a bare http://host:8080 means its /v1)
    model: str = ""
    api_key: str = ""
    api: str = "chat"  # "chat": /chat/completions; "responses": /responses, continuing by previous_response_id
    timeout_s: float = 60.0  # to connect and get an answer, and between two complete lines of the stream
    deadline_s: float = 600.0  # for a whole reply, however steadily it trickles in
    max_bytes: int = 64 * 2**20  # of one reply
    max_line_bytes: int = 2**20  # of one line of the stream

    @property
    def api_url(self) -> str:
        url = self.base_url.strip().rstrip("/")
        try:
            bare = urlsplit(url).path in ("", "/")
        except ValueError:  # e.g. "http://[" half typed: its request fails and says why
            return url
        return url + "/v1" if bare else url

    @property
    def cleartext_host(self) -> str | None:
        """The host that would get the API key unencrypted (plain http, not loopback); None if none would."""
        try:
            parts = urlsplit(self.base_url.strip())
            host = parts.hostname
        except ValueError:  # not a URL yet: nothing is sent
            return None
        if not self.api_key or parts.scheme.lower() != "http" or not host or is_loopback(host):
            return None
        return host
