"""Settings of memory formation: the `extraction`, `pipeline` and `persona` sections of the config.

The models are defined in `langchain_tdai_recall._settings.formation`, below `config.py` (which
composes them into `TdaiConfig`) and below this package (which reads them); this module is
their documented path and hands them on unchanged.
"""

from __future__ import annotations

from langchain_tdai_recall._settings.formation import (
    ExtractionConfig,
    PersonaConfig,
    PipelineConfig,
    StructuredOutputMethod,
)

__all__ = [
    "ExtractionConfig",
    "PersonaConfig",
    "PipelineConfig",
    "StructuredOutputMethod",
]
