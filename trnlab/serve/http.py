"""An OpenAI-compatible HTTP server for the tiny GPT on the simulated Trainium (standard library only).

    python -m trnlab serve [--host 127.0.0.1] [--port 8000] [--device trn2] [--max-batch 8]

    POST /v1/completions        {"model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "seed", "stream"}
    POST /v1/chat/completions   {"model", "messages": [{"role": "user", "content": "407+38"}], ...}
    GET  /v1/models             the one model this server serves
    GET  /health                {"status": "ok", ...}

Responses follow OpenAI's shapes (`text_completion`, `chat.completion`, and with "stream": true
server-sent events of `...chunk` objects ending in `data: [DONE]`), and every response — the
last chunk of a stream too — also carries a "trnlab" object with the simulated latency breakdown
(TTFT, TPOT, end-to-end, output tokens/s on the simulated device). `top_k` is an extension (as in
vLLM). The last user message of a chat is the prompt: the model answers single questions.

Errors use OpenAI's JSON shape {"error": {"message", "type", "param", "code"}} and the server keeps
serving: invalid JSON, missing or wrong-type fields, a prompt over the context, characters the
tokenizer does not know → 400 (OpenAI answers 400 for all of these); a body over MAX_BODY_BYTES →
413; an unknown model or path → 404. A client that disconnects mid-stream has its request cancelled
(its KV-cache slot is freed at the next step). Requests from many connections (one thread each,
ThreadingHTTPServer) all go to one continuous-batching engine (trnlab.serve.service).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from trnlab.data.tokenizer import UnknownCharacterError
from trnlab.model.generate import PromptTooLongError
from trnlab.serve.sampling import SamplingParams
from trnlab.serve.service import Service

MAX_BODY_BYTES = 64 * 1024       # the model reads 32 tokens; anything near this size is not a real request


class APIError(Exception):
    """An error answered in OpenAI's JSON shape."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 type: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = status, message, param, code, type

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


# -- validating a request body ------------------------------------------------------------------------
_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "array": list, "object": dict}


def _field(body: dict, name: str, kind: str, required: bool = False, default=None):
    if name not in body or body[name] is None:
        if required:
            raise APIError(400, f"you must provide a '{name}' parameter", name, "missing_required_parameter")
        return default
    value = body[name]
    wrong = not isinstance(value, _TYPES[kind]) or (kind in ("integer", "number") and isinstance(value, bool))
    if wrong:
        raise APIError(400, f"invalid type for '{name}': expected {'a' if kind != 'integer' else 'an'} {kind}, "
                            f"got {type(value).__name__} {json.dumps(value)[:40]}", name, "invalid_type")
    return value


def _sampling(body: dict) -> SamplingParams:
    temperature = _field(body, "temperature", "number", default=0.0)
    top_p = _field(body, "top_p", "number", default=1.0)
    top_k = _field(body, "top_k", "integer")
    seed = _field(body, "seed", "integer")
    max_tokens = _field(body, "max_tokens", "integer")
    if _field(body, "n", "integer", default=1) != 1:
        raise APIError(400, "only n=1 is supported: one answer per request", "n", "invalid_value")
    checks = [("temperature", 0 <= temperature <= 2, f"{temperature} is not in [0, 2]"),
              ("top_p", 0 < top_p <= 1, f"{top_p} is not in (0, 1]"),
              ("top_k", top_k is None or top_k >= 0, f"{top_k} is below 0"),
              ("max_tokens", max_tokens is None or max_tokens >= 1, f"{max_tokens} is below 1")]
    for name, ok, why in checks:
        if not ok:
            raise APIError(400, f"invalid value for '{name}': {why}", name, "invalid_value")
    return SamplingParams(float(temperature), top_k, float(top_p), seed, max_tokens)


def _prompt(body: dict, chat: bool) -> str:
    if not chat:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            return prompt[0]                     # OpenAI accepts a list of prompts; we answer one at a time
        return _field(body, "prompt", "string", required=True)
    messages = _field(body, "messages", "array", required=True)
    if not messages:
        raise APIError(400, "'messages' must contain at least one message", "messages", "invalid_value")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str) \
                or not isinstance(message.get("content"), str):
            raise APIError(400, f"invalid type for 'messages[{i}]': expected an object with string 'role' and "
                                f"'content'", f"messages[{i}]", "invalid_type")
    users = [m["content"] for m in messages if m["role"] == "user"]
    if not users:
        raise APIError(400, "'messages' has no message with role 'user': the model answers the last user message",
                       "messages", "invalid_value")
    return users[-1]


# -- the handler ----------------------------------------------------------------------------------------
class Handler(BaseHTTPRequestHandler):
    server_version = "trnlab-serve/1"
    service: Service                 # set on the subclass make_server creates

    def log_message(self, format, *args) -> None:     # quiet: tests and notebooks start servers
        pass

    # plumbing
    def _send_json(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, error: APIError) -> None:
        self._send_json(error.status, error.body())

    def do_GET(self) -> None:
        service = self.service
        if self.path == "/health":
            self._send_json(200, {"status": "ok", "model": service.model_name, "device": service.device,
                                  "running": len(service.engine.running), "waiting": len(service.engine.waiting)})
        elif self.path == "/v1/models":
            self._send_json(200, {"object": "list", "data": [self._model_card()]})
        elif self.path == f"/v1/models/{service.model_name}":
            self._send_json(200, self._model_card())
        else:
            self._error(APIError(404, f"unknown path {self.path!r}: GET /health, /v1/models", None, "not_found"))

    def _model_card(self) -> dict:
        return {"id": self.service.model_name, "object": "model", "created": 0, "owned_by": "trnlab",
                "context_length": self.service.context, "device": self.service.device}

    def do_POST(self) -> None:
        try:
            chat = {"/v1/completions": False, "/v1/chat/completions": True}.get(self.path)
            if chat is None:
                raise APIError(404, f"unknown path {self.path!r}: POST /v1/completions, /v1/chat/completions",
                               None, "not_found")
            body = self._read_body()
            model = _field(body, "model", "string", required=True)
            if model != self.service.model_name:
                raise APIError(404, f"the model '{model}' does not exist: this server serves "
                                    f"'{self.service.model_name}'", "model", "model_not_found")
            prompt = _prompt(body, chat)
            params = _sampling(body)
            stream = _field(body, "stream", "boolean", default=False)
            ids = self._encode(prompt)
        except APIError as error:
            return self._error(error)
        self._answer(prompt, ids, params, chat, stream, model)

    def _read_body(self) -> dict:
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            raise APIError(400, "the request has no Content-Length header", None, "invalid_request")
        if int(length) > MAX_BODY_BYTES:
            self.close_connection = True
            left = min(int(length), 16 * MAX_BODY_BYTES)  # drain a little, so the client can read the answer
            while left > 0:
                chunk = self.rfile.read(min(left, 65536))
                if not chunk:
                    break
                left -= len(chunk)
            raise APIError(413, f"request body too large: {int(length):,} bytes, at most {MAX_BODY_BYTES:,}",
                           None, "request_too_large")
        raw = self.rfile.read(int(length))
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise APIError(400, f"we could not parse the JSON body of your request: {error}", None, "invalid_json")
        if not isinstance(body, dict):
            raise APIError(400, f"the JSON body must be an object, got {type(body).__name__}", None, "invalid_json")
        return body

    def _encode(self, prompt: str) -> list[int]:
        try:
            return self.service.encode(prompt)
        except UnknownCharacterError as error:
            raise APIError(400, str(error), "prompt", "unknown_character")
        except PromptTooLongError as error:
            raise APIError(400, f"this model's maximum context length is {self.service.context} tokens: {error}",
                           "prompt", "context_length_exceeded")

    # answering
    def _answer(self, prompt: str, ids: list[int], params: SamplingParams, chat: bool, stream: bool, model: str):
        service = self.service
        started = time.perf_counter()
        request, events = service.submit(ids, params)
        ident = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        created = int(time.time())
        head = {"id": ident, "object": "chat.completion" if chat else "text_completion", "created": created,
                "model": model}
        sent, produced = "", 0
        if stream:
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                head["object"] = "chat.completion.chunk" if chat else "text_completion"
                if chat:
                    self._event({**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                      "finish_reason": None}]})
            except OSError:
                service.cancel(request)
                return
        while True:
            event = events.get()
            if isinstance(event, Exception):          # the engine failed: say so, in the API's shape
                error = APIError(500, f"the engine failed: {event}", None, "engine_error", "server_error")
                return self._error(error) if not stream else self._event(error.body(), done=True)
            finished = event.finish_reason is not None
            produced += 1                                # the engine may be ahead: show this event's tokens only
            if stream:
                text = service.text_so_far(prompt, request.output_ids[:produced], finished)
                delta, sent = text[len(sent):], text
                choice = {"index": 0, "finish_reason": event.finish_reason}
                choice.update({"delta": {"content": delta} if delta or not finished else {}} if chat
                              else {"text": delta, "logprobs": None})
                chunk = {**head, "choices": [choice]}
                if finished:
                    chunk.update(self._extras(request, ids, started))
                try:
                    self._event(chunk, done=finished)
                except OSError:                          # the client went away: free its slot
                    service.cancel(request)
                    return
            if finished:
                break
        if not stream:
            text = service.text_of(prompt, request.output_ids)
            choice = ({"index": 0, "message": {"role": "assistant", "content": text}} if chat
                      else {"index": 0, "text": text, "logprobs": None})
            choice["finish_reason"] = event.finish_reason
            self._send_json(200, {**head, "choices": [choice], **self._extras(request, ids, started)})

    def _extras(self, request, ids: list[int], started: float) -> dict:
        n = len(request.output_ids)
        return {"usage": {"prompt_tokens": len(ids), "completion_tokens": n, "total_tokens": len(ids) + n},
                "trnlab": {"device": self.service.device, "simulated": self.service.device != "cpu",
                           **request.latency(), "wall_s": time.perf_counter() - started}}

    def _event(self, payload: dict, done: bool = False) -> None:
        self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
        if done:
            self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


def make_server(service: Service, host: str = "127.0.0.1", port: int = 8000) -> ThreadingHTTPServer:
    """A server bound to host:port (port 0: a free one, see server.server_address) for `service`."""
    handler = type("BoundHandler", (Handler,), {"service": service})
    server_class = type("Server", (ThreadingHTTPServer,), {"request_queue_size": 128})  # listen backlog (default 5)
    server = server_class((host, port), handler)
    server.daemon_threads = True
    return server


class BackgroundServer:
    """A server in a background thread (notebooks, tests): `with BackgroundServer(service) as url: ...`."""

    def __init__(self, service: Service, host: str = "127.0.0.1", port: int = 0):
        self.service = service
        self.server = make_server(service, host, port)
        self.thread = threading.Thread(target=self.server.serve_forever, name="trnlab-http", daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "BackgroundServer":
        self.service.start()
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()
        self.service.stop()

    def __enter__(self) -> str:
        return self.start().url

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trnlab serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--device", choices=("trn1", "trn2", "trn3", "cpu"), default="trn2")
    parser.add_argument("--max-batch", type=int, default=8, help="sequences in the running decode batch")
    args = parser.parse_args(argv)
    service = Service(args.device, max_batch=args.max_batch).start()
    server = make_server(service, args.host, args.port)
    host, port = server.server_address[:2]
    print(f"serving {service.model_name} on the simulated {args.device} at http://{host}:{port}/v1 "
          f"(Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        service.stop()
    return 0
