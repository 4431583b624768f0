"""Short chat templates of thinking families, written for the tests (the real ones are longer; these
keep what thinking detection needs): each marks an assistant turn's thoughts (`reasoning_content`,
gpt-oss's `thinking`, Magistral's content blocks) and opens, closes or leaves alone the reply's
thoughts in its generation prompt as its family does."""

# DeepSeek R1: the generation prompt opens the thoughts (with thinking off it closes them at once);
# earlier turns' thoughts are dropped
R1 = """{%- for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}{%- if add_generation_prompt %}<|im_start|>assistant
<think>
{% if not enable_thinking %}</think>

{% endif %}{% endif %}"""

# Qwen3: the model opens its thoughts itself; with thinking off the prompt holds an empty one; an
# assistant turn's thoughts are rendered back
QWEN3 = """{%- for m in messages %}<|im_start|>{{ m.role }}
{% if m.role == 'assistant' and m.reasoning_content %}<think>
{{ m.reasoning_content }}
</think>

{% endif %}{{ m.content }}<|im_end|>
{% endfor %}{%- if add_generation_prompt %}<|im_start|>assistant
{% if enable_thinking is defined and enable_thinking is false %}<think>

</think>

{% endif %}{% endif %}"""

# Magistral: [THINK] blocks inside an assistant turn's content list
MAGISTRAL = """{#- Magistral -#}[SYSTEM_PROMPT]Think first, inside [THINK] and [/THINK].[/SYSTEM_PROMPT]
{%- for m in messages %}
{%- if m.role == 'user' %}[INST]{{ m.content }}[/INST]
{%- elif m.content is string %}{{ m.content }}</s>
{%- else %}{% for block in m.content %}{% if block.type == 'thinking' %}[THINK]{{ block.thinking }}[/THINK]{% else %}{{ block.text }}{% endif %}{% endfor %}</s>
{%- endif %}{% endfor %}"""

# Seed-OSS: <seed:think> around an assistant turn's thoughts
SEED = """{%- for m in messages %}<seed:bos>{{ m.role }}
{% if m.reasoning_content %}<seed:think>{{ m.reasoning_content }}</seed:think>{% endif %}{{ m.content }}<seed:eos>
{% endfor %}{%- if add_generation_prompt %}<seed:bos>assistant
{% endif %}"""

# gpt-oss's Harmony: a message per channel; an assistant turn's `thinking` in the analysis channel;
# `reasoning_effort` in the system message. This one opens the analysis channel in its generation
# prompt, so the bundled model (which never learnt Harmony) starts inside its thoughts
HARMONY = """<|start|>system<|message|>Reasoning: {{ reasoning_effort | default('medium') }}<|end|>
{%- for m in messages %}
{%- if m.role == 'assistant' %}{% if m.thinking %}<|start|>assistant<|channel|>analysis<|message|>{{ m.thinking }}<|end|>{% endif %}<|start|>assistant<|channel|>final<|message|>{{ m.content }}<|end|>
{%- else %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|start|>assistant<|channel|>analysis<|message|>{% endif %}"""

# IBM Granite 3.3: thinking asked for by the `thinking` variable; the answer in <response>
GRANITE_3_3 = """{%- if thinking %}<|start_of_role|>system<|end_of_role|>Write your thoughts between <think></think> and write your response between <response></response> for each user query.<|end_of_text|>
{% endif %}{%- for m in messages %}<|start_of_role|>{{ m.role }}<|end_of_role|>{{ m.content }}<|end_of_text|>
{% endfor %}{%- if add_generation_prompt %}<|start_of_role|>assistant<|end_of_role|>{% endif %}"""

# Apriel: the reply opens in its thoughts, unmarked; the answer between [BEGIN FINAL RESPONSE] and [END FINAL RESPONSE]
APRIEL = """{%- for m in messages %}<|{{ m.role }}|>
{{ m.content }}
<|end|>
{% endfor %}{%- if add_generation_prompt %}<|assistant|>
Here are my reasoning steps:
{% endif %}{# the answer follows [BEGIN FINAL RESPONSE] #}"""

FAMILIES = {
    "r1": R1,
    "qwen3": QWEN3,
    "magistral": MAGISTRAL,
    "seed": SEED,
    "harmony": HARMONY,
    "granite": GRANITE_3_3,
    "apriel": APRIEL,
}
