"""CheXpercept: a sequential, multi-level lesion-perception benchmark for VLMs on chest X-rays.

Importing this package loads no heavy optional dependency (torch, vllm, transformers, sam2,
openai, google-genai); those are imported inside the backend that needs them.
"""

__version__ = "0.1.0"
