"""A chat template from a file (llama.cpp's --chat-template-file), used instead of the model's own:
read and checked before the model loads, so a missing, unreadable or broken file is said at once,
naming the file and, for a template Jinja cannot read, the line."""

from __future__ import annotations

from pathlib import Path

from ..errors import ModelLoadError
from .worker import generation_tag

MAX_TEMPLATE_BYTES = 1 << 20  # real templates take a few to a few tens of kilobytes


def read_template_file(path: str) -> str:
    """The template's text; ModelLoadError with the reason where it cannot serve as one."""
    where = f"the chat template file {path}"
    file = Path(path)
    try:
        if not file.is_file():
            raise ModelLoadError(f"{where} does not exist" if not file.exists() else f"{where} is not a file")
        if file.stat().st_size > MAX_TEMPLATE_BYTES:
            raise ModelLoadError(f"{where} holds more than {MAX_TEMPLATE_BYTES >> 20} MiB: it is no chat template")
        source = file.read_bytes().decode("utf-8")
    except OSError as e:
        raise ModelLoadError(f"{where} cannot be read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ModelLoadError(f"{where} is not UTF-8 text") from None
    if not source.strip():
        raise ModelLoadError(f"{where} is empty")
    problem = syntax_problem(source)
    if problem:
        raise ModelLoadError(f"{where} is not a Jinja template this app can read: {problem}")
    return source


def syntax_problem(source: str) -> str | None:
    """Why Jinja (with what the template renderer adds: {% break %}, {% generation %}) cannot read
    `source`, with the line; None when it can. Parsed, not run."""
    from jinja2 import TemplateSyntaxError
    from jinja2.sandbox import SandboxedEnvironment

    env = SandboxedEnvironment(extensions=["jinja2.ext.loopcontrols", generation_tag()])
    try:
        env.parse(source)
    except TemplateSyntaxError as e:
        return f"line {e.lineno}: {e.message}"
    except RecursionError:
        return "it is nested too deeply"
    return None
