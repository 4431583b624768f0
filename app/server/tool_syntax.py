"""The tool-call syntaxes of model families, told apart by their chat template's source (as
llama.cpp's common/chat.cpp does), and the grammar that makes a reply a call in that syntax.

- Hermes 2 Pro, Qwen 2.5, Qwen 3: `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, one block a call
- Llama 3.1 / 3.2 / 3.3: `{"name": ..., "parameters": {...}}`, the whole reply, maybe after `<|python_tag|>`
- Mistral Nemo: `[TOOL_CALLS][{"name": ..., "arguments": {...}, "id": ...}, ...]`
- IBM Granite 3.x: `<|tool_call|>[{"name": ..., "arguments": {...}}, ...]`
- Command R7B: `<|START_ACTION|>[{"tool_call_id": "0", "tool_name": ..., "parameters": {...}}, ...]<|END_ACTION|>`
- Functionary v3.2: `>>>name\n{...}` a call, `>>>all\n` before text (the prompt ends with the reply's first `>>>`)
- gpt-oss (Harmony): `<|channel|>commentary to=functions.name <|constrain|>json<|message|>{...}`, a message a call
- Qwen3-Coder, Qwen 3.5, Nemotron 3 Nano: `<tool_call>\n<function=name>\n<parameter=key>\nvalue\n</parameter>\n</function>\n</tool_call>`
- Seed-OSS: the same in `<seed:tool_call>`, a value without line breaks around it
- GLM 4.5 / 4.6 / 4.7: `<tool_call>name\n<arg_key>key</arg_key>\n<arg_value>value</arg_value>\n</tool_call>`
- MiniMax M2: `<minimax:tool_call>\n<invoke name="name">\n<parameter name="key">value</parameter>\n</invoke>\n</minimax:tool_call>`
- DeepSeek V3.2 / V4 (DSML): MiniMax's shape in `<｜DSML｜function_calls>` (V4: `tool_calls`), tags `<｜DSML｜invoke name=...>`,
  `<｜DSML｜parameter name="key" string="true|false">`, the tag saying whether the value is a string
  (these six write a string argument raw, any other as JSON)
- DeepSeek V3.1: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>name<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>`
- DeepSeek R1: the same with `function<｜tool▁sep｜>name\n```json\n{...}\n``` ` in each call
- Kimi K2: `<|tool_calls_section_begin|><|tool_call_begin|>functions.name:0<|tool_call_argument_begin|>{...}<|tool_call_end|>...`
- Ministral 3, Magistral, Devstral: `[TOOL_CALLS]name[ARGS]{...}` a call
- Mistral Small 3.2: `[TOOL_CALLS]name[CALL_ID]id[ARGS]{...}`, an id of 9 letters and digits
- Apertus: `<|tools_prefix|>[{"name": {...}}, ...]<|tools_suffix|>`, a call's name its one key
- Nemotron Nano v2: `<TOOLCALL>[{"name": ..., "arguments": {...}}, ...]</TOOLCALL>`
- LFM2, LFM2.5: `<|tool_call_start|>[name(key="value", ...), ...]<|tool_call_end|>`, Python calls
- any other template: the generic format, a JSON object the grammar holds every reply to:
  `{"tool_calls": [{"name": ..., "arguments": {...}}, ...]}` or `{"response": "..."}`
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from dataclasses import dataclass
from enum import Enum, auto

from app.engine.sampling.constraints import check_grammar, schema_grammar
from app.models.gguf_meta import read_gguf

from .tool_syntaxes.form import Form
from .tool_syntaxes.harmony import HARMONY_TRIGGERS, HarmonyForm
from .tool_syntaxes.lark import json_value, literal, string_arguments
from .tool_syntaxes.named import (
    DEEPSEEK_R1_FORM,
    DEEPSEEK_V3_1_FORM,
    KIMI_K2_FORM,
    MINISTRAL_3_FORM,
    MISTRAL_SMALL_3_2_FORM,
)
from .tool_syntaxes.pythonic import PythonicForm
from .tool_syntaxes.xml import (
    DEEPSEEK_V3_2_FORM,
    DEEPSEEK_V4_FORM,
    GLM_4_5_FORM,
    GLM_4_7_FORM,
    MINIMAX_M2_FORM,
    QWEN3_CODER_FORM,
    SEED_OSS_FORM,
    XmlForm,
)


class Wrapper(Enum):
    OBJECT = auto()  # each call its own object (after the trigger, or the reply's start)
    ARRAY = auto()  # the calls in one JSON array
    RECIPIENT = auto()  # each call `name\n{arguments}` after the trigger; the recipient `all` opens text
    FORM = auto()  # a syntax of its own, read and written by its `form` (tool_syntaxes/)
    GENERIC = auto()  # the generic format's object


@dataclass(frozen=True)
class Syntax:
    family: str  # the models that write it, for messages and docs
    wrapper: Wrapper
    name_key: str = "name"
    arguments_key: str = "arguments"
    # a key written before the name that numbers the calls of a reply (Command R7B's "tool_call_id")
    id_key: str | None = None
    trigger: str | None = None  # the text that opens calls anywhere in a reply
    closer: str = ""  # the text that ends a call's block
    # at the reply's start, a call may come bare, after one of these: a trigger that is a control
    # token is written as no text (Mistral's [TOOL_CALLS], Llama's <|python_tag|>)
    start_prefixes: tuple[str, ...] = ()
    start_char: str = "{"
    parallel: bool = True  # several calls in one reply
    # under tool_choice "auto", the patterns that set off the grammar (engine's SamplingParams.grammar_triggers);
    # `{names}` in one stands for any of the tools' names; none given: the trigger's text
    lazy_triggers: tuple[str, ...] = ()
    takes_several: bool = True  # the family's template renders several calls in one turn
    # its template adds a call's arguments to its text as they are: they reach it as JSON text, not an object
    arguments_as_text: bool = False
    form: Form | None = None  # Wrapper.FORM: its reader, grammar and writer
    # the markers of a syntax without a form (`markers`): where a vocabulary holds one as a control
    # token, a reply shows it written out and a grammar draws it as that token
    preserved: tuple[str, ...] = ()
    # its template shows no assistant turn's `tool_calls` (LFM2's): they reach it written in its
    # syntax at the end of the turn's content (`Form.write`)
    calls_in_content: bool = False
    # its template shows the tools; else a system message describes them, and how to call them
    describes_tools: bool = True
    # a call's id made of its name and its index in the reply, as the family writes it (Kimi's
    # `functions.{name}:{index}`, which its template shows again beside the call's result)
    call_id: str | None = None
    # (function, argument) of the request's arguments whose values are strings: a syntax that writes
    # arguments as text writes those raw (with_functions)
    string_args: frozenset[tuple[str, str]] = frozenset()

    @property
    def is_native(self) -> bool:
        """Calls written in the model's own syntax, and tools rendered by its own template."""
        return self.wrapper is not Wrapper.GENERIC

    def with_parallel(self, parallel: bool) -> Syntax:
        return dataclasses.replace(self, parallel=parallel and self.takes_several)

    def with_functions(self, functions: tuple[dict, ...]) -> Syntax:
        """The syntax for a request of these functions (which of their arguments are strings)."""
        return dataclasses.replace(self, string_args=string_arguments(functions)) if self.form is not None else self

    @property
    def openings(self) -> tuple[str, ...]:
        """The texts that open a block of calls anywhere in a reply."""
        if self.form is not None:
            return self.form.openings
        return (self.trigger,) if self.trigger else ()

    @property
    def markers(self) -> tuple[str, ...]:
        """The texts a reply must show written out where the model's vocabulary holds them as
        control tokens (llama.cpp's preserved tokens): the parser reads them."""
        return self.form.markers if self.form is not None else self.preserved

    def id_of(self, name: str, index: int, new_id) -> str:
        """The id of a reply's call `index`: the family's own (`call_id`), else `new_id()`."""
        return self.call_id.format(name=name, index=index) if self.call_id else new_id()

    def triggers_for(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """The lazy grammar's triggers for tools of these names."""
        alternatives = "(?:" + "|".join(re.escape(n) for n in names) + ")"
        patterns = self.lazy_triggers or ((re.escape(self.trigger),) if self.trigger else ())
        return tuple(p.replace("{names}", alternatives) for p in patterns)


HERMES = Syntax(
    "Hermes 2 Pro / Qwen 2.5 / Qwen 3",
    Wrapper.OBJECT,
    trigger="<tool_call>",
    closer="</tool_call>",
    start_prefixes=("",),
    preserved=("<tool_call>", "</tool_call>"),
)
# its templates raise on an assistant turn of several calls ("This model only supports single tool-calls at once!")
LLAMA_3 = Syntax(
    "Llama 3.1 / 3.2 / 3.3",
    Wrapper.OBJECT,
    arguments_key="parameters",
    start_prefixes=("<|python_tag|>", ""),
    takes_several=False,
    # a call is the whole reply: it opens the reply, after blanks
    lazy_triggers=(r'^\s*(<\|python_tag\|>|\{\s*"name"\s*:)',),
    preserved=("<|python_tag|>",),
)
MISTRAL_NEMO = Syntax(
    "Mistral Nemo",
    Wrapper.ARRAY,
    trigger="[TOOL_CALLS]",
    start_prefixes=("",),
    start_char="[",
    preserved=("[TOOL_CALLS]",),
)
GRANITE = Syntax(
    "IBM Granite 3.x",
    Wrapper.ARRAY,
    trigger="<|tool_call|>",
    start_prefixes=("",),
    start_char="[",
    preserved=("<|tool_call|>",),
)
COMMAND_R7B = Syntax(
    "Command R7B",
    Wrapper.ARRAY,
    name_key="tool_name",
    arguments_key="parameters",
    id_key="tool_call_id",
    trigger="<|START_ACTION|>",
    closer="<|END_ACTION|>",
    start_prefixes=("",),
    start_char="[",
    preserved=("<|START_ACTION|>", "<|END_ACTION|>"),
)
FUNCTIONARY_V3_2 = Syntax(
    "Functionary v3.2",
    Wrapper.RECIPIENT,
    trigger=">>>",
    # the prompt ends with `>>>`: every reply opens with a recipient
    start_prefixes=("",),
    start_char="",
    lazy_triggers=(r"^{names}\n", r">>>{names}\n"),
    arguments_as_text=True,
)
# a call's name is its object's one key (name_key ""), its value the arguments
APERTUS = Syntax(
    "Apertus",
    Wrapper.ARRAY,
    name_key="",
    trigger="<|tools_prefix|>",
    closer="<|tools_suffix|>",
    start_char="[",
    preserved=("<|tools_prefix|>", "<|tools_suffix|>"),
)
NEMOTRON_NANO_V2 = Syntax(
    "Nemotron Nano v2",
    Wrapper.ARRAY,
    trigger="<TOOLCALL>",
    closer="</TOOLCALL>",
    start_char="[",
    preserved=("<TOOLCALL>", "</TOOLCALL>"),
)
GPT_OSS = Syntax(
    "gpt-oss (Harmony)",
    Wrapper.FORM,
    form=HarmonyForm(),
    trigger="<|channel|>",
    lazy_triggers=HARMONY_TRIGGERS,
    takes_several=False,  # its template renders one call a message; `<|call|>` ends the turn
)


def _xml(family: str, form: XmlForm) -> Syntax:
    return Syntax(family, Wrapper.FORM, form=form, trigger=form.openings[0])


QWEN3_CODER = _xml("Qwen3-Coder / Qwen 3.5 / Nemotron 3 Nano", QWEN3_CODER_FORM)
SEED_OSS = _xml("Seed-OSS", SEED_OSS_FORM)
GLM_4_5 = _xml("GLM 4.5 / 4.6", GLM_4_5_FORM)
GLM_4_7 = _xml("GLM 4.7", GLM_4_7_FORM)
MINIMAX_M2 = _xml("MiniMax M2", MINIMAX_M2_FORM)
DEEPSEEK_V3_2 = _xml("DeepSeek V3.2 (DSML)", DEEPSEEK_V3_2_FORM)
DEEPSEEK_V4 = _xml("DeepSeek V4 (DSML)", DEEPSEEK_V4_FORM)
DEEPSEEK_V3_1 = Syntax("DeepSeek V3.1", Wrapper.FORM, form=DEEPSEEK_V3_1_FORM, trigger=DEEPSEEK_V3_1_FORM.openings[0])
DEEPSEEK_R1 = Syntax("DeepSeek R1", Wrapper.FORM, form=DEEPSEEK_R1_FORM, trigger=DEEPSEEK_R1_FORM.openings[0])
KIMI_K2 = Syntax("Kimi K2", Wrapper.FORM, form=KIMI_K2_FORM, trigger=KIMI_K2_FORM.openings[0], call_id="functions.{name}:{index}")
MINISTRAL_3 = Syntax(
    "Ministral 3 / Magistral / Devstral",
    Wrapper.FORM,
    form=MINISTRAL_3_FORM,
    trigger=MINISTRAL_3_FORM.openings[0],
    arguments_as_text=True,  # its templates take a call's arguments as text or an object alike
)
# its template takes back only call ids of 9 letters and digits (Tools.new_id), as Mistral Nemo's
MISTRAL_SMALL_3_2 = Syntax(
    "Mistral Small 3.2", Wrapper.FORM, form=MISTRAL_SMALL_3_2_FORM, trigger=MISTRAL_SMALL_3_2_FORM.openings[0]
)
LFM2 = Syntax("LFM2 / LFM2.5", Wrapper.FORM, form=PythonicForm(), trigger="<|tool_call_start|>")
GENERIC = Syntax("generic (any template)", Wrapper.GENERIC)


def detect(source: str | None) -> Syntax:
    """The syntax a chat template's source teaches, as llama.cpp tells them apart (the first match
    wins); the generic format for a template with none of them, or none at all. A template that
    writes calls of a syntax of its own but never shows the tools (DeepSeek V3.1's and R1's own)
    keeps its syntax, and the tools are described to it (`describes_tools`)."""
    if not source:
        return GENERIC
    found = _by_source(source)
    if "tools" in source:
        return found
    return dataclasses.replace(found, describes_tools=False) if found.form is not None else GENERIC


def _by_source(source: str) -> Syntax:
    if "<|channel|>" in source:
        return GPT_OSS
    if "｜DSML｜" in source:
        return DEEPSEEK_V3_2 if "function_calls>" in source else DEEPSEEK_V4
    if "<｜tool▁calls▁begin｜>" in source and "<｜tool▁sep｜>" in source:
        return DEEPSEEK_R1 if "```json" in source else DEEPSEEK_V3_1
    if "<|tool_calls_section_begin|>" in source and "<|tool_call_begin|>" in source:
        return KIMI_K2
    if "[TOOL_CALLS]" in source and "[ARGS]" in source:
        return MISTRAL_SMALL_3_2 if "[CALL_ID]" in source else MINISTRAL_3
    if "<|tools_prefix|>" in source:
        return APERTUS
    if "<TOOLCALL>" in source:
        return NEMOTRON_NANO_V2
    if "<|tool_list_start|>" in source or "List of tools: [" in source:
        return LFM2 if "tool_calls" in source else dataclasses.replace(LFM2, calls_in_content=True)
    if "<seed:tool_call>" in source:
        return SEED_OSS
    if "<minimax:tool_call>" in source:
        return MINIMAX_M2
    if "<arg_key>" in source and "<arg_value>" in source:
        return GLM_4_7 if "</arg_key><arg_value>" in source else GLM_4_5
    if "<tool_call>" in source and "<function=" in source and "<parameter=" in source:
        return QWEN3_CODER
    if "<tool_call>" in source and "<invoke name=" not in source:  # MiniMax M3's calls are its own
        return HERMES
    if "<|start_header_id|>ipython<|end_header_id|>" in source:
        return LLAMA_3
    if "[TOOL_CALLS]" in source:
        return MISTRAL_NEMO
    if "<|tool_call|>" in source and "<|start_of_role|>" in source:
        return GRANITE
    if "<|START_ACTION|>" in source and "<|END_ACTION|>" in source:
        return COMMAND_R7B
    if ">>>all" in source and ">>>${recipient}" in source:
        return FUNCTIONARY_V3_2
    return GENERIC


def model_syntax(path: str) -> Syntax:
    """The syntax of the chat template in a model file (its header read once, then kept while the file is the same)."""
    try:
        status = os.stat(path)
    except OSError:
        return GENERIC
    return _file_syntax(path, status.st_mtime_ns, status.st_size)


@functools.lru_cache(maxsize=32)
def _file_syntax(path: str, _mtime_ns: int, _size: int) -> Syntax:
    template = read_gguf(path).metadata.get("tokenizer.chat_template")  # an unreadable file: no metadata
    return detect(template if isinstance(template, str) else None)


def call_grammar(syntax: Syntax, functions: tuple[dict, ...], choice: str, lenient: bool = False) -> str:
    """The grammar (llguidance's Lark) of a reply under `tool_choice` (`auto`, `required` or a
    function's name): with `auto` the generic format's (a call or an answer), or for a native syntax
    the calls' grammar that waits for the family's trigger (`Syntax.lazy_triggers`): text before it
    is free. It ends after the last call the request allows (one unless `syntax.parallel`): only an
    end-of-generation token may follow. `lenient`: a keyword of the parameters llguidance cannot
    hold a reply to is left unchecked (a function not `strict`), else refused naming it."""
    callable_ = [f for f in functions if choice in ("auto", "required") or f["name"] == choice]
    if syntax.form is not None:
        return check_grammar(syntax.form.grammar(callable_, syntax.parallel, lenient))
    if syntax.wrapper is Wrapper.RECIPIENT:
        return check_grammar(_recipient_grammar(callable_, syntax.parallel, lenient))
    objects = [_call_schema(f, syntax) for f in callable_]
    if not syntax.is_native:
        return schema_grammar(_generic_schema(objects, choice, syntax.parallel), strict=not lenient)
    call = f"tc_call: {json_value({'anyOf': objects}, lenient)}"
    return check_grammar(f"{_NATIVE_ROOTS[syntax.family](syntax.parallel)}\n{call}")


def _call_schema(function: dict, syntax: Syntax) -> dict:
    # the grammar writes the keys in this order, the order the family's template shows
    properties = {syntax.id_key: {"type": "string", "pattern": "^[0-9]{1,2}$"}} if syntax.id_key else {}
    if not syntax.name_key:  # the name is the one key
        return {"type": "object", "properties": {function["name"]: function["parameters"]}, "required": [function["name"]]}
    properties |= {syntax.name_key: {"const": function["name"]}, syntax.arguments_key: function["parameters"]}
    return {"type": "object", "properties": properties, "required": list(properties)}


def _generic_schema(objects: list[dict], choice: str, parallel: bool) -> dict:
    many = {"type": "array", "items": {"anyOf": objects}, "minItems": 1, **({} if parallel else {"maxItems": 1})}
    calls = {"type": "object", "properties": {"tool_calls": many}, "required": ["tool_calls"]}
    if choice != "auto":
        return calls
    answer = {"type": "object", "properties": {"response": {"type": "string"}}, "required": ["response"]}
    return {"anyOf": [calls, answer]}


def _hermes_root(parallel: bool) -> str:
    more = ' ("\\n" tc_block)*' if parallel else ""
    opening, closing = literal("<tool_call>\n"), literal("\n</tool_call>")
    return f"start: tc_block{more}\ntc_block: {opening} tc_call {closing}"


def _array_root(syntax: Syntax):
    """The root of a family that writes its calls as one JSON array after its trigger (and before its closer)."""

    def root(parallel: bool) -> str:
        more = ' (", " tc_call)*' if parallel else ""
        return f"start: {literal(syntax.trigger + '[')} tc_call{more} {literal(']' + syntax.closer)}"

    return root


def _recipient_grammar(functions: list[dict], parallel: bool, lenient: bool) -> str:
    """Functionary's calls: `name\n` then the arguments of that function, `>>>` between calls (and
    before the first, where a lazy grammar starts at its trigger)."""
    more = f" ({literal('>>>')} tc_call)*" if parallel else ""
    heads = [f"{literal(function['name'] + chr(10))} {json_value(function['parameters'], lenient)}" for function in functions]
    return "\n".join([f"start: {literal('>>>')}? tc_call{more}", f"tc_call: {' | '.join(heads)}"])


_NATIVE_ROOTS = {
    HERMES.family: _hermes_root,
    LLAMA_3.family: lambda _parallel: f"start: {literal('<|python_tag|>')}? tc_call",
    MISTRAL_NEMO.family: _array_root(MISTRAL_NEMO),
    GRANITE.family: _array_root(GRANITE),
    COMMAND_R7B.family: _array_root(COMMAND_R7B),
    APERTUS.family: _array_root(APERTUS),
    NEMOTRON_NANO_V2.family: _array_root(NEMOTRON_NANO_V2),
}
