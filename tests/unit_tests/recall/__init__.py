"""Tests of recall: the engine, the injection gate, prompt text, reranking, rules and language."""
