"""The endpoints, a module per API (chat, completions, responses; models; health and metrics), each
reading a request, submitting it (`submit.py`) and answering whole or over the one SSE tail (`sse.py`)."""
