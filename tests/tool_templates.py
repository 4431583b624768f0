"""Short chat templates in the tool syntax of each family, written for the tests (the real ones are
longer; these keep what family detection and the syntax need): each renders `tools`, an assistant
turn's `tool_calls` and a `role: "tool"` result the way its family does."""

# Hermes 2 Pro / Qwen 2.5 / Qwen 3: ChatML, the tools in <tools>, calls in <tool_call> blocks
HERMES = """{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}# Tools

You may call one or more functions to assist with the user query.
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for m in messages %}
{%- if m.role == 'user' or (m.role == 'assistant' and not m.tool_calls) %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% elif m.role == 'assistant' %}<|im_start|>assistant
{{ m.content }}
{%- for call in m.tool_calls %}
<tool_call>
{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>
{% elif m.role == 'tool' %}<|im_start|>user
<tool_response>
{{ m.content }}
</tool_response><|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

# Llama 3.1 / 3.2 / 3.3: headers, the tools in the first user turn, a call as the whole reply, results as ipython
LLAMA_3 = """{%- set ns = namespace(first_user=-1) %}
{%- for m in messages %}{% if m.role == 'user' and ns.first_user < 0 %}{% set ns.first_user = loop.index0 %}{% endif %}{% endfor %}
{{- bos_token }}<|start_header_id|>system<|end_header_id|>

{% if tools %}Environment: ipython
{% endif %}Cutting Knowledge Date: December 2023<|eot_id|>
{%- for m in messages %}
{%- if m.role == 'user' %}<|start_header_id|>user<|end_header_id|>

{% if tools and loop.index0 == ns.first_user %}Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.
{% for tool in tools %}{{ tool | tojson(indent=4) }}
{% endfor %}{% endif %}{{ m.content }}<|eot_id|>
{%- elif m.role == 'assistant' and m.tool_calls %}<|start_header_id|>assistant<|end_header_id|>

{% if m.tool_calls | length != 1 %}{{ raise_exception('This model only supports single tool-calls at once!') }}{% endif %}
{%- for call in m.tool_calls %}{"name": "{{ call.function.name }}", "parameters": {{ call.function.arguments | tojson }}}{% endfor %}<|eom_id|>
{%- elif m.role == 'tool' or m.role == 'ipython' %}<|start_header_id|>ipython<|end_header_id|>

{{ m.content }}<|eot_id|>
{%- else %}<|start_header_id|>{{ m.role }}<|end_header_id|>

{{ m.content }}<|eot_id|>
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>

{% endif %}"""

# Mistral Nemo: [INST] turns, the tools in [AVAILABLE_TOOLS] before the last user turn, calls as a JSON array
MISTRAL_NEMO = """{%- set ns = namespace(last_user=-1) %}
{%- for m in messages %}{% if m.role == 'user' %}{% set ns.last_user = loop.index0 %}{% endif %}{% endfor %}
{{- bos_token }}
{%- for m in messages %}
{%- if m.role == 'user' %}{% if tools and loop.index0 == ns.last_user %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}[INST]{{ m.content }}[/INST]
{%- elif m.role == 'assistant' and m.tool_calls %}[TOOL_CALLS][
{%- for call in m.tool_calls %}{% if call.id | length != 9 %}{{ raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}{% endif %}
{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}, "id": "{{ call.id }}"}{% if not loop.last %}, {% endif %}
{%- endfor %}]{{ eos_token }}
{%- elif m.role == 'assistant' %}{{ m.content }}{{ eos_token }}
{%- elif m.role == 'tool' %}[TOOL_RESULTS]{"content": {{ m.content | tojson }}, "call_id": "{{ m.tool_call_id }}"}[/TOOL_RESULTS]
{%- endif %}
{%- endfor %}"""

# IBM Granite 3.x: role markers, the tools in an available_tools turn, calls as a JSON array after <|tool_call|>
GRANITE = """<|start_of_role|>system<|end_of_role|>You are a helpful assistant.
{%- if tools %} When a tool is required, respond only with <|tool_call|> followed by a JSON list of tools used.{% endif %}<|end_of_text|>
{% if tools %}<|start_of_role|>available_tools<|end_of_role|>{{ tools | tojson(indent=4) }}<|end_of_text|>
{% endif %}
{%- for m in messages %}
{%- if m.role == 'assistant' and m.tool_calls %}<|start_of_role|>assistant<|end_of_role|><|tool_call|>[
{%- for call in m.tool_calls %}{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}{% if not loop.last %}, {% endif %}{% endfor %}]<|end_of_text|>
{% else %}<|start_of_role|>{{ m.role }}<|end_of_role|>{{ m.content }}<|end_of_text|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|start_of_role|>assistant<|end_of_role|>{% endif %}"""

# Command R7B: turn tokens, the tools in the system preamble, numbered calls between <|START_ACTION|> and
# <|END_ACTION|>, each result sent back under its call's number
COMMAND_R7B = """{%- set ns = namespace(ids=[]) %}
{%- for m in messages %}{% for call in m.tool_calls or [] %}{% set ns.ids = ns.ids + [call.id] %}{% endfor %}{% endfor %}
{{- bos_token }}<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|># System Preamble
{% if tools %}## Available Tools
Write <|START_ACTION|> followed by a list of JSON tool calls, each with "tool_name" and "parameters", then <|END_ACTION|>.
```json
[
{% for tool in tools %}    {{ tool | tojson }}{% if not loop.last %},{% endif %}
{% endfor %}]
```{% endif %}<|END_OF_TURN_TOKEN|>
{%- for m in messages %}
{%- if m.role == 'user' %}<|START_OF_TURN_TOKEN|><|USER_TOKEN|>{{ m.content }}<|END_OF_TURN_TOKEN|>
{%- elif m.role == 'assistant' and m.tool_calls %}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_ACTION|>[
{%- for call in m.tool_calls %}
    {"tool_call_id": "{{ ns.ids.index(call.id) }}", "tool_name": "{{ call.function.name }}", "parameters": {{ call.function.arguments | tojson }}}{% if not loop.last %},{% endif %}
{%- endfor %}
]<|END_ACTION|><|END_OF_TURN_TOKEN|>
{%- elif m.role == 'assistant' %}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_RESPONSE|>{{ m.content }}<|END_RESPONSE|><|END_OF_TURN_TOKEN|>
{%- elif m.role == 'tool' %}<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|><|START_TOOL_RESULT|>[
    {"tool_call_id": "{{ ns.ids.index(m.tool_call_id) }}", "results": {"0": {{ m.content | tojson }}}, "is_error": null}
]<|END_TOOL_RESULT|><|END_OF_TURN_TOKEN|>
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>{% endif %}"""

# Functionary v3.2: Llama 3 headers, each part of a reply after `>>>` and its recipient (`all` for text,
# else the function called with its arguments' JSON text as given); the prompt opens the reply's first `>>>`
FUNCTIONARY_V3_2 = """{{ bos_token }}<|start_header_id|>system<|end_header_id|>

You are capable of executing available function(s) if required.
Ask for the required input to:recipient==all
Use JSON for function arguments.
Respond in this format:
>>>${recipient}
${content}
Available functions:
{% for tool in tools or [] %}{{ tool | tojson }}
{% endfor %}<|eot_id|>
{%- for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>

{% if m.role == 'assistant' %}{% if m.content %}{{ '>>>all\n' + m.content }}{% endif %}
{%- for call in m.tool_calls or [] %}{{ '>>>' + call.function.name + '\n' + call.function.arguments }}{% endfor %}
{%- else %}{{ m.content }}{% endif %}<|eot_id|>
{%- endfor %}
{%- if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>

>>>{% endif %}"""

# gpt-oss (Harmony): a message a channel; the tools as a TypeScript-like namespace in a developer
# message; a call is a message to `functions.NAME` (its recipient in the role's header, as the real
# template writes it back), its result a message from that function; earlier thoughts (`thinking`)
# only before a call. The generation prompt leaves the channel to the model, as the real one does
GPT_OSS = """<|start|>system<|message|>Reasoning: {{ reasoning_effort | default('medium') }}<|end|>
{%- if tools %}<|start|>developer<|message|># Tools

## functions

namespace functions {
{% for tool in tools %}// {{ tool.function.description }}
type {{ tool.function.name }} = (_: {{ tool.function.parameters | tojson }}) => any;
{% endfor %}} // namespace functions<|end|>{% endif %}
{%- set last = namespace(name=none) %}
{%- for m in messages %}
{%- if m.role == 'assistant' and m.tool_calls %}
{%- if m.thinking %}<|start|>assistant<|channel|>analysis<|message|>{{ m.thinking }}<|end|>{% endif %}
{%- set call = m.tool_calls[0].function %}<|start|>assistant to=functions.{{ call.name }}<|channel|>commentary json<|message|>{{ call.arguments | tojson }}<|call|>
{%- set last.name = call.name %}
{%- elif m.role == 'assistant' %}<|start|>assistant<|channel|>final<|message|>{{ m.content }}<|end|>
{%- elif m.role == 'tool' %}<|start|>functions.{{ last.name }} to=assistant<|channel|>commentary<|message|>{{ m.content | tojson }}<|end|>
{%- else %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|start|>assistant{% endif %}"""

# Qwen3-Coder (and Qwen 3.5, Nemotron 3 Nano): ChatML, the tools in <tools>, a call's arguments as
# tags, a string raw, any other as JSON
QWEN3_CODER = """{%- if tools %}<|im_start|>system
# Tools

You have access to the following functions:

<tools>
{% for tool in tools %}{{ tool.function | tojson }}
{% endfor %}</tools>

If you choose to call a function ONLY reply in the following format with NO suffix:

<tool_call>
<function=example_function_name>
<parameter=example_parameter_1>
value_1
</parameter>
</function>
</tool_call><|im_end|>
{% endif %}
{%- for m in messages %}
{%- if m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant
{%- if m.content %}
{{ m.content }}{% endif %}
{%- for call in m.tool_calls %}

<tool_call>
<function={{ call.function.name }}>
{% for k, v in call.function.arguments | items %}<parameter={{ k }}>
{{ v if v is string else v | tojson }}
</parameter>
{% endfor %}</function>
</tool_call>
{%- endfor %}<|im_end|>
{% elif m.role == 'tool' %}<|im_start|>user
<tool_response>
{{ m.content }}
</tool_response><|im_end|>
{% else %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

# Seed-OSS: the same tags in <seed:tool_call>, a value without line breaks around it
SEED_OSS = """{%- if tools %}<seed:bos>system
Tool List:
{{ tools | tojson }}
Call a tool in this format:
<seed:tool_call>
<function=example_function_name>
<parameter=example_parameter_1>value_1</parameter>
</function>
</seed:tool_call><seed:eos>
{% endif %}
{%- for m in messages %}
{%- if m.role == 'assistant' and m.tool_calls %}<seed:bos>assistant
{%- for call in m.tool_calls %}

<seed:tool_call>
<function={{ call.function.name }}>
{% for k, v in call.function.arguments | items %}<parameter={{ k }}>{{ v if v is string else v | tojson }}</parameter>
{% endfor %}</function>
</seed:tool_call>
{%- endfor %}<seed:eos>
{% else %}<seed:bos>{{ m.role }}
{{ m.content }}<seed:eos>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<seed:bos>assistant
{% endif %}"""

# GLM 4.5 / 4.6: role tokens, a call's name after <tool_call>, each argument an <arg_key> and an <arg_value>
GLM_4_5 = """{#- a template that opens with [ reads as JSON to gguf-new-metadata -#}[gMASK]<sop>
{%- if tools %}<|system|>
# Tools

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>

For each function call, output the function name and arguments within the following XML format:
<tool_call>{function-name}
<arg_key>{arg-key-1}</arg_key>
<arg_value>{arg-value-1}</arg_value>
</tool_call>{% endif %}
{%- for m in messages %}
{%- if m.role == 'assistant' %}<|assistant|>
{{ m.content }}
{%- for call in m.tool_calls or [] %}

<tool_call>{{ call.function.name }}
{% for k, v in call.function.arguments | items %}<arg_key>{{ k }}</arg_key>
<arg_value>{{ v if v is string else v | tojson }}</arg_value>
{% endfor %}</tool_call>
{%- endfor %}
{%- elif m.role == 'tool' %}<|observation|>
<tool_response>
{{ m.content }}
</tool_response>
{%- else %}<|{{ m.role }}|>
{{ m.content }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|assistant|>
{% endif %}"""

# GLM 4.7: the same without line breaks between the tags
GLM_4_7 = (
    GLM_4_5.replace("{{ call.function.name }}\n{% for", "{{ call.function.name }}{% for")
    .replace("</arg_key>\n<arg_value>{{ v if", "</arg_key><arg_value>{{ v if")
    .replace("</arg_value>\n{% endfor %}", "</arg_value>{% endfor %}")
)

# MiniMax M2: its own role markers, a block of <invoke>s in <minimax:tool_call>
MINIMAX_M2 = """]~!b[]~b]system
{%- if tools %}
# Tools
Here are the tools available in JSONSchema format:
<tools>
{% for tool in tools %}<tool>{{ tool.function | tojson }}</tool>
{% endfor %}</tools>
When making tool calls, use XML format to invoke tools and pass parameters:
<minimax:tool_call>
<invoke name="tool-name-1">
<parameter name="param-key-1">param-value-1</parameter>
</invoke>
</minimax:tool_call>{% endif %}[e~[
{%- for m in messages %}
{%- if m.role == 'assistant' %}]~b]ai
{{ m.content }}
{%- if m.tool_calls %}

<minimax:tool_call>
{% for call in m.tool_calls %}<invoke name="{{ call.function.name }}">
{% for k, v in call.function.arguments | items %}<parameter name="{{ k }}">{{ v if v is string else v | tojson }}</parameter>
{% endfor %}</invoke>
{% endfor %}</minimax:tool_call>
{%- endif %}[e~[
{%- elif m.role == 'tool' %}]~b]tool
<response>{{ m.content }}</response>[e~[
{%- else %}]~b]{{ m.role }}
{{ m.content }}[e~[
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}]~b]ai
{% endif %}"""

# DeepSeek V3.1: the tools described in the system part, calls in one section after the reply's text
DEEPSEEK_V3_1 = """{{ bos_token }}{%- if tools %}## Tools
You have access to the following tools:
{% for tool in tools %}### {{ tool.function.name }}
Description: {{ tool.function.description }}

Parameters: {{ tool.function.parameters | tojson }}
{% endfor %}
IMPORTANT: ALWAYS adhere to this exact format for tool use:
<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_call_name<｜tool▁sep｜>tool_call_arguments<｜tool▁call▁end｜><｜tool▁calls▁end｜>
{% endif %}
{%- for m in messages %}
{%- if m.role == 'user' %}<｜User｜>{{ m.content }}
{%- elif m.role == 'assistant' and m.tool_calls %}<｜Assistant｜>{{ m.content or '' }}<｜tool▁calls▁begin｜>
{%- for call in m.tool_calls %}<｜tool▁call▁begin｜>{{ call.function.name }}<｜tool▁sep｜>{{ call.function.arguments | tojson }}<｜tool▁call▁end｜>{% endfor %}<｜tool▁calls▁end｜><｜end▁of▁sentence｜>
{%- elif m.role == 'assistant' %}<｜Assistant｜>{{ m.content }}<｜end▁of▁sentence｜>
{%- elif m.role == 'tool' %}<｜tool▁output▁begin｜>{{ m.content }}<｜tool▁output▁end｜>
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<｜Assistant｜>{% endif %}"""

# DeepSeek R1 (llama.cpp's own R1 template, which shows the tools): a call's arguments in a json
# fence; the generation prompt opens the thoughts
DEEPSEEK_R1 = """{{ bos_token }}{%- if tools %}You can call any of the following function tools to satisfy the user's requests: {{ tools | map(attribute='function') | list | tojson(indent=2) }}

Example function tool call syntax:

<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>example_function_name
```json
{"arg1": "some_value"}
```<｜tool▁call▁end｜><｜tool▁calls▁end｜>

{% endif %}
{%- for m in messages %}
{%- if m.role == 'user' %}<｜User｜>{{ m.content }}<｜end▁of▁sentence｜>
{%- elif m.role == 'assistant' and m.tool_calls %}<｜Assistant｜><｜tool▁calls▁begin｜>
{%- for call in m.tool_calls %}{% if not loop.first %}{{ '\\n' }}{% endif %}<｜tool▁call▁begin｜>{{ call.type }}<｜tool▁sep｜>{{ call.function.name }}
```json
{{ call.function.arguments | tojson }}
```<｜tool▁call▁end｜>{% endfor %}<｜tool▁calls▁end｜><｜end▁of▁sentence｜>
{%- elif m.role == 'assistant' %}<｜Assistant｜>{{ m.content }}<｜end▁of▁sentence｜>
{%- elif m.role == 'tool' %}<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>{{ m.content }}<｜tool▁output▁end｜><｜tool▁outputs▁end｜>
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<｜Assistant｜><think>
{% endif %}"""

# Kimi K2: the tools declared as JSON; calls in a section, each named functions.NAME:INDEX
KIMI_K2 = """{%- if tools %}<|im_system|>tool_declare<|im_middle|>{{ tools | tojson }}<|im_end|>{% endif %}
{%- for m in messages %}
{%- if m.role == 'user' %}<|im_user|>user<|im_middle|>{{ m.content }}<|im_end|>
{%- elif m.role == 'assistant' %}<|im_assistant|>assistant<|im_middle|>{{ m.content or '' }}
{%- if m.tool_calls %}<|tool_calls_section_begin|>
{%- for call in m.tool_calls %}<|tool_call_begin|>functions.{{ call.function.name }}:{{ loop.index0 }}<|tool_call_argument_begin|>{{ call.function.arguments | tojson }}<|tool_call_end|>{% endfor %}<|tool_calls_section_end|>
{%- endif %}<|im_end|>
{%- elif m.role == 'tool' %}<|im_system|>tool<|im_middle|>## Return of {{ m.tool_call_id }}
{{ m.content }}<|im_end|>
{%- else %}<|im_system|>{{ m.role }}<|im_middle|>{{ m.content }}<|im_end|>{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_assistant|>assistant<|im_middle|>{% endif %}"""

# Ministral 3 / Magistral / Devstral: [INST] turns, the tools in [AVAILABLE_TOOLS], each call
# [TOOL_CALLS]NAME[ARGS]{...} (its arguments as given: text or an object)
MINISTRAL_3 = """{#- Ministral 3 -#}[SYSTEM_PROMPT]You are a helpful assistant.[/SYSTEM_PROMPT]
{%- if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}
{%- for m in messages %}
{%- if m.role == 'user' %}[INST]{{ m.content }}[/INST]
{%- elif m.role == 'assistant' %}{{ m.content or '' }}
{%- for call in m.tool_calls or [] %}[TOOL_CALLS]{{ call.function.name }}[ARGS]{{ call.function.arguments if call.function.arguments is string else call.function.arguments | tojson }}{% endfor %}</s>
{%- elif m.role == 'tool' %}[TOOL_RESULTS]{{ m.content }}[/TOOL_RESULTS]
{%- endif %}
{%- endfor %}"""

# Apertus: the tools listed in the system turn; calls as a JSON array of {"NAME": {arguments}}
APERTUS = """<s><|system_start|>You are Apertus.
{%- if tools %}

### Tools
{% for tool in tools %}{{ tool.function | tojson }}
{% endfor %}{% endif %}<|system_end|>
{%- for m in messages %}
{%- if m.role == 'user' %}<|user_start|>{{ m.content }}<|user_end|>
{%- elif m.role == 'assistant' %}<|assistant_start|>{{ m.content or '' }}
{%- if m.tool_calls %}<|tools_prefix|>[{% for call in m.tool_calls %}{"{{ call.function.name }}": {{ call.function.arguments | tojson }}}{% if not loop.last %}, {% endif %}{% endfor %}]<|tools_suffix|>{% endif %}<|assistant_end|>
{%- elif m.role == 'tool' %}<|tool_start|>{{ m.content }}<|tool_end|>{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|assistant_start|>{% endif %}"""

# Nemotron Nano v2: the tools in <AVAILABLE_TOOLS>; calls as a JSON array in <TOOLCALL>
NEMOTRON_NANO_V2 = """<SPECIAL_10>System
{%- if tools %}
You can use the following tools to assist the user if required:
<AVAILABLE_TOOLS>[{% for tool in tools %}{{ tool | tojson }}{% if not loop.last %}, {% endif %}{% endfor %}]</AVAILABLE_TOOLS>

If you decide to call any tool(s), use the following format:
<TOOLCALL>[{"name": "tool_name1", "arguments": "tool_args1"}, {"name": "tool_name2", "arguments": "tool_args2"}]</TOOLCALL>
{%- endif %}
{%- for m in messages %}
{%- if m.role == 'user' %}
<SPECIAL_11>User
{{ m.content }}
{%- elif m.role == 'assistant' %}
<SPECIAL_11>Assistant
{{ m.content or '' }}
{%- if m.tool_calls %}<TOOLCALL>[{% for call in m.tool_calls %}{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}{% if not loop.last %}, {% endif %}{% endfor %}]</TOOLCALL>{% endif %}
<SPECIAL_12>
{%- elif m.role == 'tool' %}
<SPECIAL_11>User
<TOOL_RESPONSE>[{{ m.content }}]</TOOL_RESPONSE>
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
<SPECIAL_11>Assistant
{% endif %}"""

# LFM2: the tools in the system turn between <|tool_list_start|> and <|tool_list_end|>; a turn's
# content only (an assistant turn's calls reach it written in its content, as Python calls)
LFM2 = """{{- bos_token -}}
{%- set ns = namespace(system_prompt="") -%}
{%- if messages[0]["role"] == "system" -%}
{%- set ns.system_prompt = messages[0]["content"] -%}
{%- set messages = messages[1:] -%}
{%- endif -%}
{%- if tools -%}
{%- set ns.system_prompt = ns.system_prompt + ("\\n" if ns.system_prompt else "") + "List of tools: <|tool_list_start|>[" + (tools | map("tojson") | join(", ")) + "]<|tool_list_end|>" -%}
{%- endif -%}
{%- if ns.system_prompt -%}{{- "<|im_start|>system\\n" + ns.system_prompt + "<|im_end|>\\n" -}}{%- endif -%}
{%- for message in messages -%}
{{- "<|im_start|>" + message["role"] + "\\n" -}}
{%- set content = message["content"] -%}
{%- if message["role"] == "tool" -%}{%- set content = "<|tool_response_start|>" + content + "<|tool_response_end|>" -%}{%- endif -%}
{{- content + "<|im_end|>\\n" -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- "<|im_start|>assistant\\n" -}}{%- endif -%}"""

# Mistral Small 3.2: as Ministral's, each call with its id ([CALL_ID], 9 letters and digits) and its
# arguments as an object; a result under its call's id
MISTRAL_SMALL_3_2 = """{#- Mistral Small 3.2 -#}[SYSTEM_PROMPT]You are a helpful assistant.[/SYSTEM_PROMPT]
{%- if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}
{%- for m in messages %}
{%- if m.role == 'user' %}[INST]{{ m.content }}[/INST]
{%- elif m.role == 'assistant' %}{{ m.content or '' }}
{%- for call in m.tool_calls or [] %}{% if call.id | length != 9 %}{{ raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}{% endif %}[TOOL_CALLS]{{ call.function.name }}[CALL_ID]{{ call.id }}[ARGS]{{ call.function.arguments | tojson }}{% endfor %}</s>
{%- elif m.role == 'tool' %}[TOOL_RESULTS]{{ m.tool_call_id }}[TOOL_CONTENT]{{ m.content }}[/TOOL_RESULTS]
{%- endif %}
{%- endfor %}"""

# DeepSeek V3.2 (DSML): the tools in the system text, a block of invokes, each argument's tag
# saying whether its value is a string, the results in <function_results>
DEEPSEEK_V3_2 = """{%- set dsml = '｜DSML｜' -%}{{ bos_token }}
{%- if tools %}## Tools
Call them in a "<{{ dsml }}function_calls>" block:
<{{ dsml }}function_calls>
<{{ dsml }}invoke name="$FUNCTION_NAME">
<{{ dsml }}parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</{{ dsml }}parameter>
</{{ dsml }}invoke>
</{{ dsml }}function_calls>
<functions>
{% for tool in tools %}{{ tool.function | tojson }}
{% endfor %}</functions>
{% endif %}
{%- for m in messages %}
{%- if m.role == 'user' %}<｜User｜>{{ m.content }}
{%- elif m.role == 'assistant' %}<｜Assistant｜></think>{{ m.content or '' }}
{%- if m.tool_calls %}

<{{ dsml }}function_calls>
{% for call in m.tool_calls %}<{{ dsml }}invoke name="{{ call.function.name }}">
{% set args = call.function.arguments %}{% if args is string %}{% set args = args | from_json %}{% endif %}
{%- for k, v in args | items %}{% if v is string %}<{{ dsml }}parameter name="{{ k }}" string="true">{{ v }}</{{ dsml }}parameter>
{% else %}<{{ dsml }}parameter name="{{ k }}" string="false">{{ v | tojson }}</{{ dsml }}parameter>
{% endif %}{% endfor %}</{{ dsml }}invoke>
{% endfor %}</{{ dsml }}function_calls>{% endif %}<｜end▁of▁sentence｜>
{%- elif m.role == 'tool' %}

<function_results>
<result>{{ m.content }}</result>
</function_results>
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<｜Assistant｜><think></think>{% endif %}"""

FAMILIES = {
    "hermes": HERMES,
    "llama3": LLAMA_3,
    "mistral": MISTRAL_NEMO,
    "granite": GRANITE,
    "command_r7b": COMMAND_R7B,
    "functionary": FUNCTIONARY_V3_2,
    "gpt_oss": GPT_OSS,
    "qwen3_coder": QWEN3_CODER,
    "seed_oss": SEED_OSS,
    "glm": GLM_4_5,
    "glm47": GLM_4_7,
    "minimax": MINIMAX_M2,
    "deepseek_v3_1": DEEPSEEK_V3_1,
    "deepseek_r1": DEEPSEEK_R1,
    "kimi_k2": KIMI_K2,
    "ministral": MINISTRAL_3,
    "mistral_small": MISTRAL_SMALL_3_2,
    "apertus": APERTUS,
    "nemotron_v2": NEMOTRON_NANO_V2,
    "lfm2": LFM2,
    "deepseek_v3_2": DEEPSEEK_V3_2,
}
