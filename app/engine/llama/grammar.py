"""llama-cpp-python's JSON grammars: GBNF for any JSON object, and the converter of a JSON schema.
What bounds them and who may ask: sampling/constraints.py, the only module that imports this one."""

from __future__ import annotations

from llama_cpp.llama_grammar import JSON_GBNF, json_schema_to_gbnf

JSON_OBJECT_GBNF = JSON_GBNF  # its root is an object


def schema_to_gbnf(schema_json: str) -> str:
    """The converter's grammar of a JSON schema (as JSON text); it raises what it meets."""
    return json_schema_to_gbnf(schema_json)
