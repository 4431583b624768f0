"""Short chat templates that cannot render part of a conversation, written for the tests (the real
ones are longer; these keep what capability detection looks at): each needs one of llama.cpp's
polyfills, which the app finds by rendering them (app/engine/prompt/caps.py)."""

# Gemma 2: no system role at all (it raises), turns that must alternate, no tools
REFUSES_SYSTEM = """{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}
{%- for m in messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}
{%- set role = 'model' if m['role'] == 'assistant' else m['role'] %}<start_of_turn>{{ role }}
{{ m['content'] | trim }}<end_of_turn>
{% endfor %}{% if add_generation_prompt %}<start_of_turn>model
{% endif %}"""

# Functionary v3.2's way with calls: the arguments added to the text as they are, so a mapping
# cannot be (JSON text is what it reads); tool results as their own turns
STRING_ARGUMENTS = """{% for m in messages %}<|{{ m.role }}|>
{% if m.tool_calls %}{% for call in m.tool_calls %}>>>{{ call.function.name + '\\n' + call.function.arguments }}
{% endfor %}{% else %}{{ m.content }}
{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>
{% endif %}"""

# Firefunction v2: the tools as `functions` (JSON text) in its system turn, never `tools`; calls'
# arguments read as a mapping
FUNCTIONS = """{{ bos_token }}<|system|>
You may call functions. Available functions as JSON spec:
{{ functions }}
Today is {{ datetime }}.
{% for m in messages %}<|{{ m.role }}|>
{{ m.content }}{% for call in m.tool_calls or [] %} functools[{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}]{% endfor %}
{% endfor %}{% if add_generation_prompt %}<|assistant|>
{% endif %}"""

# a template with no tool role: a tool's result would vanish; content read as typed parts only
TYPED_NO_TOOL_ROLE = """{% for m in messages %}{% if m.role in ('system', 'user', 'assistant') %}<|{{ m.role }}|>
{% for part in m.content %}{{ part.text }}{% endfor %}
{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>
{% endif %}"""

FAMILIES = {
    "refuses_system": REFUSES_SYSTEM,
    "string_arguments": STRING_ARGUMENTS,
    "functions": FUNCTIONS,
    "typed_no_tool_role": TYPED_NO_TOOL_ROLE,
}
