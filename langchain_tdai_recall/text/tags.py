"""The names of the blocks this package writes into prompts: one list for writing and stripping.

`recall.prompt` renders these blocks; `text.clean` strips them (with their contents) from user
text before it is searched or stored, and `recall.prompt.escape_block_text` neutralises them in
stored text, so one memory can never open or close a block.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "INJECTED_TAGS",
    "KEY_MEMORIES_TAG",
    "MEMORY_TOOLS_GUIDE_TAG",
    "RELEVANT_MEMORIES_TAG",
    "SCENE_NAVIGATION_TAG",
    "STANDING_RULES_TAG",
    "UPSTREAM_SCENES_TAG",
    "USER_PERSONA_TAG",
    "USER_PROFILE_TAG",
]

RELEVANT_MEMORIES_TAG: Final = "relevant-memories"
"""The per-turn memory block in front of the user's message."""
USER_PERSONA_TAG: Final = "user-persona"
"""The L3 persona in the system context."""
STANDING_RULES_TAG: Final = "standing-instructions"
"""Instructions with priority -1 in the system context."""
KEY_MEMORIES_TAG: Final = "key-memories"
"""Memories pinned by priority in the system context."""
USER_PROFILE_TAG: Final = "user-profile"
"""The user's profile (their other memories within a budget) in the system context."""
SCENE_NAVIGATION_TAG: Final = "scene-navigation"
"""The L2 scene index in the system context."""
MEMORY_TOOLS_GUIDE_TAG: Final = "memory-tools-guide"
"""How to use the memory tools, in the system context."""
UPSTREAM_SCENES_TAG: Final = "relevant-scenes"
"""A block only the original plugin writes; stripped from text like ours."""

INJECTED_TAGS: Final = (
    RELEVANT_MEMORIES_TAG,
    USER_PERSONA_TAG,
    STANDING_RULES_TAG,
    KEY_MEMORIES_TAG,
    USER_PROFILE_TAG,
    SCENE_NAVIGATION_TAG,
    MEMORY_TOOLS_GUIDE_TAG,
    UPSTREAM_SCENES_TAG,
)
"""Every block this package (or the original plugin) writes into prompts."""
