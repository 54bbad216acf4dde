"""One structured call to any LangChain chat model: schema in, plain data (or a failure) out.

Formation talks to whatever `BaseChatModel` the user configured, and has to be right about one
thing above all: telling a *valid* answer from a failed one, because only a valid answer may move
a cursor (upstream gap G-X1 treated every failure as "nothing to remember").

- Tool-calling models get the pydantic schema through `with_structured_output(...,
  include_raw=True)` (`function_calling` by default; `json_schema` and `json_mode` on request).
  JSON mode (`response_format={"type": "json_object"}`) sends no schema to the provider, and
  OpenAI refuses it unless a message says "JSON": the schema and that instruction go into the
  system prompt, as in prompt mode.
  The raw tool arguments are kept and read leniently by `schemas.read_*`, so one odd field does
  not throw the whole answer away.
- Models without tool calling (and `structured_output="prompt"`) get the JSON schema in the
  prompt; their text is parsed tolerantly: code fences and chatter around the JSON are ignored,
  raw control characters inside strings are escaped. A truncated or missing JSON value is a
  failure, never an empty answer.
- An answer cut off by the output limit (`finish_reason` / `stop_reason` length or max tokens),
  an exception, a timeout or an empty reply is a failure with a reason.
- Every call is bounded by `timeout_s` (the call runs on a daemon thread; a late answer is
  discarded) and its token usage is read from `usage_metadata`.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Final

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable, RunnableBinding, RunnableConfig, RunnableSequence
from pydantic import BaseModel

from langchain_tdai_recall._exchange.records import clean_text
from langchain_tdai_recall.formation.config import StructuredOutputMethod
from langchain_tdai_recall.formation.schemas import InvalidAnswerError

__all__ = [
    "CallResult",
    "StructuredCaller",
    "parse_json_text",
    "resolve_chat_model",
    "supports_tools",
]

logger = logging.getLogger(__name__)

_TRUNCATED: Final = frozenset({"length", "max_tokens", "MAX_TOKENS", "model_length"})
_FENCE_RE: Final = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


@dataclass(frozen=True, slots=True)
class CallResult:
    """The outcome of one structured call: plain JSON-like data, or why there is none."""

    data: object | None
    """The answer as JSON-like data (to be read by `schemas.read_*`); `None` on failure."""
    error: str | None
    """Why the call failed (`None` when `data` is set)."""
    input_tokens: int = 0
    """Prompt tokens reported by the model (0 when it reports none)."""
    output_tokens: int = 0
    """Completion tokens reported by the model."""
    prompt_chars: int = 0
    """Characters of the system and user prompt."""
    elapsed_ms: float = 0.0
    """Wall time of the call."""


def supports_tools(model: BaseChatModel) -> bool:
    """Whether the model overrides `bind_tools` (the base class raises NotImplementedError)."""
    return type(model).bind_tools is not BaseChatModel.bind_tools


def _scan_json(text: str, start: int) -> str | None:
    """The balanced JSON value starting at `text[start]` (`{` or `[`), string-aware."""
    stack: list[str] = []
    in_string = False
    escaped = False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]":
            if not stack or stack.pop() != ch:
                return None
            if not stack:
                return text[start : i + 1]
    return None  # unbalanced: the value was cut off


def _escape_controls_in_strings(text: str) -> str:
    out: list[str] = []
    in_string = False
    escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            elif ord(ch) < 0x20:
                out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(ch, f"\\u{ord(ch):04x}"))
                continue
        elif ch == '"':
            in_string = True
        out.append(ch)
    return "".join(out)


def parse_json_text(text: str) -> object:
    """The first complete JSON object or array in a model's text reply.

    Code fences and prose around the value are ignored; raw control characters inside strings
    are escaped.

    Raises:
        InvalidAnswerError: If there is no complete JSON value (empty, prose only, truncated).
    """
    candidates: list[str] = [m.group(1) for m in _FENCE_RE.finditer(text)] + [text]
    for candidate in candidates:
        stripped = candidate.strip()
        if not stripped:
            continue
        try:
            return json.loads(stripped)
        except json.JSONDecodeError:
            pass
        starts = [i for i in (stripped.find("{"), stripped.find("[")) if i != -1]
        for start in sorted(starts):
            value = _scan_json(stripped, start)
            if value is None:
                continue
            for attempt in (value, _escape_controls_in_strings(value)):
                try:
                    return json.loads(attempt)
                except json.JSONDecodeError:
                    continue
    msg = "the reply holds no complete JSON value" if text.strip() else "the reply is empty"
    raise InvalidAnswerError(msg)


def _repaired(value: object, depth: int = 0) -> object:
    """`value` with every lone surrogate of its texts (keys too) replaced by U+FFFD.

    A model may answer a lone surrogate (escaped in JSON); such text can be neither stored
    nor sent on, and failing the window for it would fail it again at every retry.
    """
    if isinstance(value, str):
        return clean_text(value)
    if depth > 64:
        return value
    if isinstance(value, dict):
        return {_repaired(k, depth + 1): _repaired(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_repaired(v, depth + 1) for v in value]
    return value


def _finish_reason(message: AIMessage) -> str | None:
    meta = message.response_metadata or {}
    reason = meta.get("finish_reason") or meta.get("stop_reason")
    return str(reason) if reason else None


def _usage(message: AIMessage | None) -> tuple[int, int]:
    usage = getattr(message, "usage_metadata", None) or {}
    return int(usage.get("input_tokens", 0) or 0), int(usage.get("output_tokens", 0) or 0)


def _text(message: AIMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(
        b if isinstance(b, str) else str(b.get("text", ""))
        for b in content
        if isinstance(b, str) or (isinstance(b, dict) and b.get("type") == "text")
    )


def _prompt_instructions(schema: type[BaseModel]) -> str:
    spec = json.dumps(schema.model_json_schema(), ensure_ascii=False, separators=(",", ":"))
    return (
        f"\n\nAnswer with one JSON object for `{schema.__name__}` and nothing else, matching "
        f"this JSON schema:\n{spec}"
    )


class StructuredCaller:
    """Calls one chat model for structured answers, with a timeout and a tolerant fallback."""

    def __init__(
        self,
        model: BaseChatModel,
        *,
        method: StructuredOutputMethod,
        timeout_s: float,
    ) -> None:
        self.model = model
        self.timeout_s = timeout_s
        self._structured: dict[type[BaseModel], Runnable[Any, Any]] = {}
        if method == "auto":
            method = "function_calling" if supports_tools(model) else "prompt"
        self.method: StructuredOutputMethod = method

    def call(
        self,
        schema: type[BaseModel],
        system: str,
        user: str,
        *,
        config: RunnableConfig | None = None,
    ) -> CallResult:
        """Ask for one `schema` answer; never raises for a model failure."""
        started = time.perf_counter()
        prompt_chars = len(system) + len(user)
        try:
            data, message = self._call_bounded(schema, system, user, config)
        except FutureTimeout:
            return CallResult(
                None,
                f"no answer within {self.timeout_s:g} s",
                prompt_chars=prompt_chars,
                elapsed_ms=(time.perf_counter() - started) * 1000,
            )
        except InvalidAnswerError as exc:
            message = exc.args[1] if len(exc.args) > 1 else None
            tokens = _usage(message if isinstance(message, AIMessage) else None)
            return CallResult(
                None,
                f"invalid answer: {exc.args[0]}",
                *tokens,
                prompt_chars=prompt_chars,
                elapsed_ms=(time.perf_counter() - started) * 1000,
            )
        except Exception as exc:  # any provider error is a failed call, retried later
            return CallResult(
                None,
                f"model call failed: {type(exc).__name__}: {exc}",
                prompt_chars=prompt_chars,
                elapsed_ms=(time.perf_counter() - started) * 1000,
            )
        tokens = _usage(message)
        return CallResult(
            _repaired(data),
            None,
            *tokens,
            prompt_chars=prompt_chars,
            elapsed_ms=(time.perf_counter() - started) * 1000,
        )

    def _call_bounded(
        self,
        schema: type[BaseModel],
        system: str,
        user: str,
        config: RunnableConfig | None,
    ) -> tuple[object, AIMessage | None]:
        # A daemon thread per call: a model that never answers is abandoned after the timeout
        # and cannot keep the interpreter from exiting (pool threads are joined at exit).
        box: list[tuple[object, AIMessage | None] | BaseException] = []
        done = threading.Event()

        def target() -> None:
            try:
                box.append(self._call(schema, system, user, config))
            except BaseException as exc:  # handed to the caller below
                box.append(exc)
            finally:
                done.set()

        threading.Thread(target=target, name="tdai-formation-call", daemon=True).start()
        if not done.wait(self.timeout_s):
            raise FutureTimeout
        result = box[0]
        if isinstance(result, BaseException):
            raise result
        return result

    def _call(
        self,
        schema: type[BaseModel],
        system: str,
        user: str,
        config: RunnableConfig | None,
    ) -> tuple[object, AIMessage | None]:
        if self.method == "prompt":
            messages: list[BaseMessage] = [
                SystemMessage(content=system + _prompt_instructions(schema)),
                HumanMessage(content=user),
            ]
            reply: object = self.model.invoke(messages, config=config)
            if not isinstance(reply, AIMessage):
                msg = f"expected an AIMessage, got {type(reply).__name__}"
                raise InvalidAnswerError(msg)
            return self._from_message(reply, None), reply
        runnable = self._structured.get(schema)
        if runnable is None:  # built once per schema: construction is not free
            runnable = self._structured[schema] = self._structured_runnable(schema)
        if self.method == "json_mode":  # the provider gets no schema: it travels in the prompt
            system += _prompt_instructions(schema)  # (which also names JSON, as OpenAI requires)
        out = runnable.invoke([SystemMessage(content=system), HumanMessage(content=user)], config)
        if isinstance(out, AIMessage):  # the bound model alone: its message is read here
            return self._from_message(out, None), out
        if not isinstance(out, dict):
            msg = f"expected the raw and parsed answer, got {type(out).__name__}"
            raise InvalidAnswerError(msg)
        raw = out.get("raw")
        parsed = out.get("parsed")
        if not isinstance(raw, AIMessage):
            msg = "the model returned no message"
            raise InvalidAnswerError(msg)
        return self._from_message(raw, parsed), raw

    def _structured_runnable(self, schema: type[BaseModel]) -> Runnable[Any, Any]:
        """The model bound to `schema` the provider's way (tools, response format), unparsed.

        `with_structured_output(...)` is the bound model piped into a parser; with
        `include_raw=True` the model runs inside a `RunnableParallel`, which submits to a
        thread pool, and Python refuses new pool work once it has begun to exit ("cannot
        schedule new futures after interpreter shutdown"), so formation at exit would never
        reach the model. The bound model is invoked alone and its message read leniently here
        (`_from_message`); a provider whose structured runnable has another shape keeps the
        `include_raw=True` form.
        """
        piped = self.model.with_structured_output(schema, method=self.method)
        if isinstance(piped, RunnableSequence) and len(piped.steps) == 2:
            first = piped.first
            if isinstance(first, BaseChatModel | RunnableBinding):
                return first
        return self.model.with_structured_output(schema, method=self.method, include_raw=True)

    @staticmethod
    def _from_message(message: AIMessage, parsed: object) -> object:
        reason = _finish_reason(message)
        if reason in _TRUNCATED:
            msg = f"the answer was cut off by the output limit ({reason})"
            raise InvalidAnswerError(msg, message)
        if message.tool_calls:
            return message.tool_calls[0]["args"]
        if message.invalid_tool_calls:
            msg = "the tool call arguments are not valid JSON"
            raise InvalidAnswerError(msg, message)
        if isinstance(parsed, BaseModel):
            return parsed.model_dump()
        if isinstance(parsed, dict | list):
            return parsed
        try:
            return parse_json_text(_text(message))
        except InvalidAnswerError as exc:
            raise InvalidAnswerError(exc.args[0], message) from exc


def resolve_chat_model(value: BaseChatModel | str) -> BaseChatModel:
    """A chat model object, or one built by `init_chat_model` from a string.

    Strings are `provider:model` (LangChain's form, e.g. `openai:gpt-4o-mini`) or the original
    plugin's `provider/model`; the provider's LangChain package must be installed.

    Raises:
        ConfigError: If the value is neither, or the model cannot be built (the message says
            which package to install or what to fix).
    """
    from langchain_tdai_recall.errors import ConfigError  # noqa: PLC0415

    if isinstance(value, BaseChatModel):
        return value
    if not isinstance(value, str) or not value.strip():
        msg = (
            "extraction_model must be a LangChain chat model or a 'provider:model' string "
            f"(e.g. 'openai:gpt-4o-mini'), got {value!r}"
        )
        raise ConfigError(msg)
    from langchain.chat_models import init_chat_model  # noqa: PLC0415 - loads providers

    text = value.strip()
    provider: str | None = None
    if ":" not in text and "/" in text:
        provider, text = text.split("/", 1)
    try:
        return init_chat_model(text, model_provider=provider)
    except (ImportError, ValueError) as exc:
        msg = f"cannot create the chat model {value!r}: {exc}"
        raise ConfigError(msg) from exc
