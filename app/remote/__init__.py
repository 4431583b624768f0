"""A client of a remote OpenAI-compatible endpoint that streams the same events as EngineClient.generate.

A pane pointed at llama-server, vLLM or another `serve` works unchanged: tokens/s and time to first
token come from the stream, the KV hit rate from `cached_tokens` or `timings` when the server reports
them. Whatever goes wrong (down, slow, garbage, too much, an HTTP error) ends the reply with the
reason, and the client goes on serving the next one.
"""

from .chat_api import _read_line
from .client import CONVERSATIONS_KEPT, RemoteClient
from .endpoint import Endpoint, RemoteError
from .output_format import FormatError, FormattedSampling, OutputFormat, parse_schema
from .wire import _Reply

__all__ = [
    "CONVERSATIONS_KEPT",
    "Endpoint",
    "FormatError",
    "FormattedSampling",
    "OutputFormat",
    "RemoteClient",
    "RemoteError",
    "_Reply",
    "_read_line",
    "parse_schema",
]
