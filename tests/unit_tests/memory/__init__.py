"""Tests of the store behind `TdaiMemory`: records, documents, writes, damage, embedder upkeep."""
