"""Recall: search legs and fusion, prompt rendering, and the engine that assembles both blocks."""
