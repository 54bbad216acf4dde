"""A local OpenAI- and Anthropic-compatible HTTP server on 127.0.0.1 for the real clients.

It answers `POST /v1/chat/completions` (OpenAI) and `POST /v1/messages` (Anthropic) the way
those APIs do, with a tool call for the structured-output tool the client sent. The answer's
content comes from a `ScriptedFormationModel`'s handlers, so the real `ChatOpenAI` /
`ChatAnthropic` request and response code runs end to end with deterministic answers.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from langchain_tdai_recall.testing import ScriptedFormationModel

_KINDS = {
    "ExtractionAnswer": "extract",
    "ConsolidationAnswer": "consolidate",
    "SceneAnswer": "scenes",
    "PersonaAnswer": "persona",
}


@dataclass
class Server:
    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    truncate_next: list[bool] = field(default_factory=list)
    """When the list holds True, the next OpenAI answer is cut off (finish_reason=length)."""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if isinstance(b, dict))


def _answer(
    model: ScriptedFormationModel, tools: list[dict[str, Any]], system: str, user: str
) -> tuple[str, Any]:
    names = [t.get("function", t).get("name", "") for t in tools]
    names += [n for n in _KINDS if f"`{n}`" in system]  # JSON mode: the schema is in the prompt
    name = next(n for n in names if n in _KINDS)
    kind = _KINDS[name]
    answer = model._answer(kind, system, user)  # type: ignore[arg-type]
    return name, model._wrap(kind, answer)  # type: ignore[arg-type]


@contextmanager
def llm_server(model: ScriptedFormationModel) -> Iterator[Server]:
    """Serve until the block ends."""
    state: Server = Server(url="")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return

        def _send(self, payload: dict[str, Any]) -> None:
            body = json.dumps(payload).encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            request = json.loads(self.rfile.read(length) or b"{}")
            request["_path"] = self.path
            state.requests.append(request)
            if self.path.endswith("/chat/completions"):
                self._openai(request)
            elif self.path.endswith("/messages"):
                self._anthropic(request)
            else:
                self.send_error(404)

        def _reject(self, message: str) -> None:
            body = json.dumps(
                {"error": {"message": message, "type": "invalid_request_error", "code": None}}
            ).encode("utf-8")
            self.send_response(400)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _openai(self, request: dict[str, Any]) -> None:
            messages = request["messages"]
            system = "".join(_text(m["content"]) for m in messages if m["role"] == "system")
            user = _text(next(m for m in reversed(messages) if m["role"] == "user")["content"])
            fmt = (request.get("response_format") or {}).get("type")
            if fmt == "json_object" and not any(
                "json" in _text(m["content"]).lower() for m in messages
            ):  # what OpenAI answers to JSON mode without the word in the messages
                self._reject(
                    "'messages' must contain the word 'json' in some form, to use "
                    "'response_format' of type 'json_object'."
                )
                return
            if fmt in ("json_object", "json_schema"):
                tools = request.get("tools", [])
                if fmt == "json_schema":
                    tools = [{"name": request["response_format"]["json_schema"]["name"]}]
                name, answer = _answer(model, tools, system, user)
                self._send(
                    {
                        "id": "chatcmpl-local",
                        "object": "chat.completion",
                        "created": 0,
                        "model": request.get("model", "local"),
                        "choices": [
                            {
                                "index": 0,
                                "message": {
                                    "role": "assistant",
                                    "content": json.dumps(answer, ensure_ascii=False),
                                },
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {
                            "prompt_tokens": 100,
                            "completion_tokens": 20,
                            "total_tokens": 120,
                        },
                    }
                )
                return
            name, answer = _answer(model, request.get("tools", []), system, user)
            arguments = json.dumps(answer, ensure_ascii=False)
            finish = "tool_calls"
            if state.truncate_next and state.truncate_next.pop(0):
                arguments, finish = arguments[: len(arguments) // 2], "length"
            self._send(
                {
                    "id": "chatcmpl-local",
                    "object": "chat.completion",
                    "created": 0,
                    "model": request.get("model", "local"),
                    "choices": [
                        {
                            "index": 0,
                            "message": {
                                "role": "assistant",
                                "content": None,
                                "tool_calls": [
                                    {
                                        "id": f"call_{len(state.requests)}",
                                        "type": "function",
                                        "function": {"name": name, "arguments": arguments},
                                    }
                                ],
                            },
                            "finish_reason": finish,
                        }
                    ],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
                }
            )

        def _anthropic(self, request: dict[str, Any]) -> None:
            system = _text(request.get("system", ""))
            user = _text(request["messages"][-1]["content"])
            name, answer = _answer(model, request.get("tools", []), system, user)
            self._send(
                {
                    "id": "msg_local",
                    "type": "message",
                    "role": "assistant",
                    "model": request.get("model", "local"),
                    "content": [
                        {
                            "type": "tool_use",
                            "id": f"toolu_{len(state.requests)}",
                            "name": name,
                            "input": answer,
                        }
                    ],
                    "stop_reason": "tool_use",
                    "stop_sequence": None,
                    "usage": {"input_tokens": 90, "output_tokens": 30},
                }
            )

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
