"""Prompts: building a request's tokens, chat templates, and the sandbox that renders them."""
