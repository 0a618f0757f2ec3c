"""One interface for every model provider (vLLM, transformers, OpenAI, Azure, Gemini, baselines).

Providers are registered by name and imported lazily: importing ``utils.llm`` loads no SDK.
"""

from utils.llm.base import ChatModel, Completion, Message, TurnRequest, Usage
from utils.llm.registry import PROVIDERS, create_model, default_model, provider_class

__all__ = ["PROVIDERS", "ChatModel", "Completion", "Message", "TurnRequest", "Usage",
           "create_model", "default_model", "provider_class"]
