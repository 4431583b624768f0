"""The engine over the OpenAI-compatible HTTP API (aiohttp on the engine client's event loop)."""
