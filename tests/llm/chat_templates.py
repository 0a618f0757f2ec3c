"""Chat templates of three families, written here (no downloads), for the local-provider tests.

Their role handling is the families' own (docs/chat_templates.md); their markup emits the tiny
Qwen2-VL's vision block per image part, so the tiny model of ``tiny_vlm.py`` can run them:

- :data:`GEMMA2`: no system role (raises "System role not supported") and strict alternation,
  as google/gemma-2-*-it;
- :data:`LLAMA2`: strict alternation, the system text rendered inside the first user turn
  (``<<SYS>>``), as meta-llama/Llama-2-*-chat (Mistral's templates raise the same way);
- :data:`CHATML`: ChatML (Qwen), accepts any sequence of roles.

Every template raises on :data:`MARKER`, so a test can make one request's rendering fail.
Content may be a string or a list of ``text`` / ``image`` / ``image_url`` parts.
"""

from __future__ import annotations

#: A word every template here refuses (raises a jinja2 TemplateError through raise_exception).
MARKER = "FORBIDDEN-MARKER"
#: The template's message for :data:`MARKER`.
MARKER_ERROR = "this template refuses FORBIDDEN-MARKER"

_CONTENT = (
    "{%- macro content(message) -%}"
    "{%- if message['content'] is string -%}{{ message['content'] }}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] in ['image', 'image_url', 'image_pil'] -%}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{%- elif part['type'] == 'text' -%}{{ part['text'] }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- endmacro -%}"
    "{%- for message in messages -%}"
    "{%- if '" + MARKER + "' in content(message) -%}"
    "{{ raise_exception('" + MARKER_ERROR + "') }}"
    "{%- endif -%}{%- endfor -%}"
)

_ALTERNATE = (
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
)

#: Gemma 2 (google/gemma-2-9b-it's role logic).
GEMMA2 = _CONTENT + (
    "{% if messages[0]['role'] == 'system' %}"
    "{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}" + _ALTERNATE +
    "{% if message['role'] == 'assistant' %}{% set role = 'model' %}"
    "{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\n' + content(message) | trim + '<end_of_turn>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)

#: Llama 2 chat (meta-llama/Llama-2-7b-chat-hf's role logic).
LLAMA2 = _CONTENT + (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = content(messages[0]) %}"
    "{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
    "{% for message in loop_messages %}" + _ALTERNATE +
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set text = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + content(message) %}"
    "{% else %}{% set text = content(message) %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '<s>[INST] ' + text | trim + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' ' + text | trim + ' </s>' }}{% endif %}"
    "{% endfor %}"
)

#: ChatML (Qwen).
CHATML = _CONTENT + (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ content(message) }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

#: Family name -> template.
FAMILIES = {"gemma2": GEMMA2, "llama2": LLAMA2, "chatml": CHATML}
