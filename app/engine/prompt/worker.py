"""The child process that renders a model's chat template: `python -m app.engine.prompt.worker`.

A chat template is a program from a model file, so it runs here, where a loop cannot stall the
server and a memory bomb hits this process's limit, not the app's; the parent kills it when a
render overruns its time (sandbox.py). Frames on stdin/stdout: 4-byte big-endian length,
then JSON. It answers {"ready": true} once, then per job {"text": ...} or {"error": ..., "kind": ...};
a job with "caps" is answered {"caps": ...}: what the template renders (caps.py), found by rendering it.
Imports nothing of the app but caps.py (which imports nothing), so it starts in the time Jinja takes to import.
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


def generation_tag():
    """Hugging Face's `{% generation %}…{% endgeneration %}` (it marks the assistant's text for
    training): its body written as it is."""
    from jinja2 import nodes
    from jinja2.ext import Extension

    class Generation(Extension):
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        @staticmethod
        def _body(caller):
            return caller()

    return Generation


class Renderer:
    def __init__(self):
        from jinja2.sandbox import SandboxedEnvironment

        # what Hugging Face's renderer reads: {% break %} and {% continue %}, {% generation %}; not
        # its immutable sandbox, as templates build lists with append (Kimi K2): the values a render
        # changes are this process's copies, and Jinja's sandbox still guards every attribute
        extensions = ["jinja2.ext.loopcontrols", generation_tag()]
        self._env = SandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=extensions)
        self._env.globals["raise_exception"] = self._raise
        # what Hugging Face's renderer gives templates, which tool-calling templates use
        self._env.globals["strftime_now"] = _strftime_now
        self._env.filters["tojson"] = _tojson
        self._env.filters["from_json"] = json.loads  # llama.cpp's, for arguments given as JSON text (DeepSeek V3.2)
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
        if job.get("caps"):
            return self._caps(job["source"], template, job["variables"], job["max_chars"])
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

    def _caps(self, source: str, template, variables: dict, max_chars: int) -> dict:
        """The template's capabilities from a few renders of made-up conversations (caps.py)."""
        from jinja2 import meta

        from app.engine.prompt.caps import detect_caps

        try:
            read = meta.find_undeclared_variables(self._env.parse(source))
        except Exception:  # compiled above, so parsed: only a resource limit lands here
            read = set()

        def render(messages: list, tools: list | None) -> str:
            given = {**variables, "messages": messages, "add_generation_prompt": False}
            if tools:
                given["tools"] = tools
            if "functions" in read and "tools" not in read:
                given["functions"] = json.dumps(tools, indent=2) if tools else ""
            try:
                return self._render(template, given, max_chars)
            except MemoryError:
                raise
            except Exception:  # a conversation it refuses tells what it cannot render
                return ""

        try:
            return {"caps": detect_caps(render, read).as_json()}
        except MemoryError:
            return MEMORY

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
