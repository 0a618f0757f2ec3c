"""Plumbing that is not about chest X-rays: config loading, CLI helpers, LLM providers.

This package never imports ``chexpercept`` (dependency direction: scripts -> chexpercept -> utils).
"""
