"""The parts of the LangGraph store adapter (`graph_store.TdaiStore`) below its batch loop.

- `namespaces`: which elements of a namespace name the scope (the template), LangGraph's label
  rules, and namespace matching;
- `items`: how an item is kept in a memory (its value, namespace and key in the metadata, the
  memory id it lives at, the vectors of its indexed fields) and what a filter sees of it;
- `ranking`: the order of a query search.

Imported only by `graph_store`, which `TdaiMemory.as_store()` imports on first use.
"""
