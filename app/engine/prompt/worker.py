"""The child process that renders a model's chat template: `python -m app.engine.prompt.worker`.

A chat template is a program from a model file, so it runs here, where a loop cannot stall the
server and a memory bomb hits this process's limit, not the app's; the parent kills it when a
render overruns its time (sandbox.py). Frames on stdin/stdout: 4-byte big-endian length,
then JSON. It answers {"ready": true} once, then per job {"text": ...} or {"error": ..., "kind": ...}.
Imports nothing of the app, so it starts in the time Jinja takes to import.
"""

from __future__ import annotations

import json
import struct
import sys

MEMORY_HEADROOM = 1 << 30  # bytes of address space a render may take beyond what the process holds at start
MAX_ERROR_BYTES = 1024  # of a template's own words (raise_exception, an exception's text) in a reply's error
CUT_MARK = "…"
_HEADER = struct.Struct(">I")
MEMORY = {"error": "it took more memory than a chat template may", "kind": "memory"}


def cut(text: str, limit: int = MAX_ERROR_BYTES) -> str:
    """`text` in at most `limit` bytes of UTF-8, ending with CUT_MARK where it was cut."""
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    return data[: limit - len(CUT_MARK.encode())].decode("utf-8", "ignore") + CUT_MARK


def read_frame(stream) -> object | None:
    """One frame's JSON value, or None at the end of the stream."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    data = stream.read(_HEADER.unpack(header)[0])
    return json.loads(data)


def write_frame(stream, value: object) -> None:
    data = json.dumps(value).encode()
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _limit_memory() -> None:
    try:
        import resource

        with open("/proc/self/statm") as f:
            held = int(f.read().split()[0]) * resource.getpagesize()
        limit = held + MEMORY_HEADROOM
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, OSError, ValueError):  # no such limit on this OS: the time budget still holds
        pass


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    """JSON as Hugging Face's templates expect it: not HTML-escaped (Jinja's own writes < as \\u003c)."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(form: str) -> str:
    import datetime

    return datetime.datetime.now().strftime(form)


def _error(text: str, kind: str) -> dict:
    return {"error": cut(text), "kind": kind}  # cut here too: a gigabyte of words never crosses the pipe


class OverBudget(Exception):
    """The render wrote more characters than its budget."""


class Renderer:
    def __init__(self):
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        self._env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        self._env.globals["raise_exception"] = self._raise
        # what Hugging Face's renderer gives templates, which tool-calling templates use
        self._env.globals["strftime_now"] = _strftime_now
        self._env.filters["tojson"] = _tojson
        self._compiled: dict[str, object] = {}  # source -> template: one model's template, compiled once

    @staticmethod
    def _raise(message: str):
        from jinja2 import TemplateError

        raise TemplateError(message)

    def handle(self, job: dict) -> dict:
        from jinja2 import TemplateError

        try:
            template = self._template(job["source"])
        except MemoryError:
            return MEMORY
        except Exception as e:  # a syntax this Jinja cannot read, or nesting too deep to compile
            return _error(str(e), "syntax")
        try:
            return {"text": self._render(template, job["variables"], job["max_chars"])}
        except OverBudget as e:
            return _error(str(e), "size")
        except MemoryError:
            return MEMORY
        except TemplateError as e:
            return _error(str(e), "template")
        except RecursionError:
            return _error("it recursed too deeply", "template")
        except Exception as e:  # any other fault of the template's code: still a reason, not a crash
            return _error(f"{type(e).__name__}: {e}", "template")

    def _template(self, source: str):
        template = self._compiled.get(source)
        if template is None:
            self._compiled.clear()
            template = self._compiled[source] = self._env.from_string(source)
        return template

    @staticmethod
    def _render(template, variables: dict, max_chars: int) -> str:
        pieces, n = [], 0
        for piece in template.generate(**variables):
            n += len(piece)
            if n > max_chars:
                raise OverBudget(f"it wrote more than {max_chars:,} characters")
            pieces.append(piece)
        return "".join(pieces)


def main() -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    renderer = Renderer()
    _limit_memory()
    write_frame(stdout, {"ready": True})
    while (job := read_frame(stdin)) is not None:
        write_frame(stdout, renderer.handle(job))


if __name__ == "__main__":
    main()
