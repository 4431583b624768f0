"""OpenAI's Responses API, without HTTP: a request checked (`request.py`), its items in the chat path's
terms (`items.py`), its response and events (`shape.py`, `streamed.py`) and the stored ones (`store.py`)."""
