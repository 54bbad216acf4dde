"""Tests of the LangChain adapters: middleware, tools, LCEL step, wrapped model, legacy executor."""
