"""Memory formation: L0 conversations become L1 memories, L2 scenes and an L3 persona.

Modules, bottom up:

- `config`: the `extraction`, `pipeline` and `persona` settings.
- `schemas`: what the model is asked to return, and the validated values the code works with.
- `prompts`: the instructions (our own words, Chinese and English) and the prompt layout.
- `_llm`: one structured call to any LangChain chat model, with a tolerant JSON fallback,
  a timeout and token accounting.
- `extraction`: windows of L0 past a cursor → validated candidate memories.
- `consolidation`: candidates → add / update / merge / delete / skip, validated, as writes.
- `scenes`: new memories → scene edits and a persona rewrite, limits enforced in code.
- `pipeline`: one scope's run end to end, exactly once (lease, cursor, one transaction).
- `scheduler`: when runs happen (turn counts with warm-up, idle, flush, close, open).
- `report`: the typed report of a run and the `tdai_extraction` event.
- `rating`: priorities (and types) for what LangGraph-store writers store without one, in the
  background, on extraction's scale.
- `manager`: the writes of the optional agent-writable memory tool (the tool itself is
  `langchain_tdai_recall.tools.manage`; `tool` is its deprecated old location).
"""
