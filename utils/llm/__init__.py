"""One interface for every model provider (vLLM, transformers, OpenAI, Azure, Gemini, baselines).

Providers are registered by name and imported lazily: importing ``utils.llm`` loads no SDK.
"""

from utils.llm.base import ChatModel, Completion, Message, TurnRequest, Usage

__all__ = ["ChatModel", "Completion", "Message", "TurnRequest", "Usage"]
