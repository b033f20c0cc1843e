"""An OpenAI-compatible HTTP server for the tiny GPT on the simulated Trainium (standard library only).

    python -m trnlab serve [--host 127.0.0.1] [--port 8000] [--device trn2] [--max-batch 8]
                           [--timeout 30] [--max-connections 512]

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
serving: invalid JSON (nested too deep, numbers too long to read), missing or wrong-type fields, a
prompt over the context, characters the tokenizer does not know → 400 (OpenAI answers 400 for all
of these); a bad Content-Length → 400; a body over MAX_BODY_BYTES → 413, sent as soon as the headers
are read (before the body, and instead of "100 Continue"); an unknown model or path → 404; a
malformed request line or headers → the standard status, in the same JSON shape. Nothing a client
sends drops the connection without an answer: anything unforeseen is a JSON 500 for that request.

One client cannot hold the server: every socket read and write has a time-out (`timeout`, seconds:
a client that sends nothing, or stops half-way, is disconnected), and at most `max_connections`
connections are open — a new one past the limit closes the longest-idle connection (one that has
not sent a request line), or, if every connection is busy, is answered 503. A client that
disconnects mid-stream has its request cancelled (its KV-cache slot is freed at the next step).
Requests from many connections (one thread each, ThreadingHTTPServer) all go to one continuous-
batching engine (trnlab.serve.service). `/health` answers 503 when the engine cannot answer.
"""

from __future__ import annotations

import argparse
import json
import socket
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from trnlab.data.tokenizer import UnknownCharacterError
from trnlab.model.checkpoint import DEFAULT_CHECKPOINT
from trnlab.model.generate import PromptTooLongError
from trnlab.serve.sampling import SamplingParams
from trnlab.serve.service import Service

MAX_BODY_BYTES = 64 * 1024       # the model reads 32 tokens; anything near this size is not a real request
MAX_BATCH = 1024                 # sequences in the running batch (the KV cache is allocated for all of them)
TIMEOUT_S = 30.0                 # a socket read or write that waits longer ends the connection
MAX_CONNECTIONS = 512            # open connections (300 concurrent requests must all be answered)
DRAIN_BYTES = 1 << 20            # after a 413, read at most this much of the unwanted body ...
DRAIN_S = 2.0                    # ... for at most this long, so the client sees the answer, then close


class APIError(Exception):
    """An error answered in OpenAI's JSON shape."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 type: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = status, message, param, code, type

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class _Answered(Exception):
    """The error answer has already been sent (a 413 goes out before the body is read)."""


def _content_length(header: str | None) -> int | None:
    """The byte count of a Content-Length header; None if it is missing or not ASCII digits ("²", "-1")."""
    if header is None:
        return None
    header = header.strip()
    if not (header.isascii() and header.isdigit()) or len(header) > 18:
        return None
    return int(header)


def _too_large(length: int) -> APIError:
    return APIError(413, f"request body too large: {length:,} bytes, at most {MAX_BODY_BYTES:,}", None,
                    "request_too_large")


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
              ("seed", seed is None or 0 <= seed < 2 ** 64, f"{seed} is not in [0, 2**64)"),
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
    default_request_version = "HTTP/1.0"     # an unparsable request line still gets a status line and headers
    service: Service                 # set on the subclass make_server creates

    def log_message(self, format, *args) -> None:     # quiet: tests and notebooks start servers
        pass

    # one connection: idle until its request line has arrived (so a new connection may close it)
    def handle_one_request(self) -> None:
        self.server.mark(self.connection, idle=True)
        super().handle_one_request()

    def parse_request(self) -> bool:
        self.server.mark(self.connection, idle=False)
        return super().parse_request()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's own errors (bad request line, headers too long, unknown method) in
        OpenAI's JSON shape instead of an HTML page."""
        self.close_connection = True
        try:
            phrase = self.responses.get(code, ("error",))[0]
            text = f"{phrase}: {message}" if message and message != phrase else phrase
            self._send_json(code, APIError(code, text, None, "invalid_request", "invalid_request_error").body())
        except OSError:
            pass

    def handle_expect_100(self) -> bool:
        """Refuse an oversized body before the client sends it (instead of "100 Continue")."""
        length = _content_length(self.headers.get("Content-Length"))
        if length is not None and length > MAX_BODY_BYTES:
            self.close_connection = True
            self._error(_too_large(length))
            return False
        return super().handle_expect_100()

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

    def _unforeseen(self, error: Exception) -> None:
        """Whatever went wrong, this request gets a JSON answer (if no answer has begun) and the server goes on."""
        self.close_connection = True
        if isinstance(error, OSError) or getattr(self, "_answer_started", False):
            return                                       # the client went away, or the answer is under way
        try:
            self._error(APIError(500, f"the server failed on this request: {type(error).__name__}: {error}"[:500],
                                 None, "internal_error", "server_error"))
        except OSError:
            pass

    def do_GET(self) -> None:
        try:
            self._get()
        except Exception as error:
            self._unforeseen(error)

    def _get(self) -> None:
        service = self.service
        if self.path == "/health":
            health = service.health()
            self._send_json(200 if health["status"] == "ok" else 503, health)
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
        self._answer_started = False
        try:
            self._post()
        except Exception as error:
            self._unforeseen(error)

    def _post(self) -> None:
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
        except _Answered:
            return
        except APIError as error:
            self.close_connection = True          # the body may be unread: it must not be taken for a request
            return self._error(error)
        self._answer(prompt, ids, params, chat, stream, model)

    def _read_body(self) -> dict:
        header = self.headers.get("Content-Length")
        length = _content_length(header)
        if length is None:
            self.close_connection = True
            said = "the request has no Content-Length header" if header is None else \
                f"the Content-Length header is not a byte count: {header[:40]!r}"
            raise APIError(400, said, None, "invalid_request")
        if length > MAX_BODY_BYTES:
            self._error(_too_large(length))          # answer first, then read a bounded part of the body
            self._drain(length)
            raise _Answered()
        try:
            raw = self.rfile.read(length)
        except TimeoutError:
            self.close_connection = True
            raise APIError(408, f"the request body did not arrive within {self.timeout:g} s", None,
                           "request_timeout") from None
        if len(raw) < length:
            self.close_connection = True
            raise APIError(400, f"the body ended after {len(raw):,} of the {length:,} bytes Content-Length "
                                f"announced", None, "invalid_request")
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError) as error:  # JSONDecodeError, UnicodeDecodeError, > 4,300 digits, depth
            raise APIError(400, f"we could not parse the JSON body of your request: {type(error).__name__}: "
                                f"{str(error)[:200]}", None, "invalid_json")
        if not isinstance(body, dict):
            raise APIError(400, f"the JSON body must be an object, got {type(body).__name__}", None, "invalid_json")
        return body

    def _drain(self, length: int) -> None:
        """Read (and drop) a little of a refused body, bounded in bytes and time, so that closing the
        socket does not reset the connection before the client has read the 413."""
        self.close_connection = True
        left, deadline = min(length, DRAIN_BYTES), time.monotonic() + DRAIN_S
        try:
            self.connection.settimeout(0.2)
            while left > 0 and time.monotonic() < deadline:
                try:
                    chunk = self.rfile.read1(min(left, 65536))
                except TimeoutError:
                    continue
                if not chunk:
                    break
                left -= len(chunk)
        except OSError:
            pass

    def _encode(self, prompt: str) -> list[int]:
        try:
            return self.service.encode(prompt)
        except UnknownCharacterError as error:
            raise APIError(400, str(error), "prompt", "unknown_character")
        except PromptTooLongError as error:
            raise APIError(400, f"this model's maximum context length is {self.service.context} tokens: "
                                f"{str(error)[:300]}", "prompt", "context_length_exceeded")

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
        self._answer_started = stream
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


class Server(ThreadingHTTPServer):
    """One thread per connection, with a limit on open connections (see the module docstring)."""

    request_queue_size = 128            # listen backlog (default 5)
    daemon_threads = True

    def __init__(self, address, handler, max_connections: int = MAX_CONNECTIONS):
        super().__init__(address, handler)
        self.max_connections = max_connections
        self._connections: dict[socket.socket, tuple[bool, float]] = {}   # socket -> (idle, since)
        self._connections_lock = threading.Lock()

    def mark(self, connection: socket.socket, idle: bool) -> None:
        with self._connections_lock:
            state = self._connections.get(connection)
            if state is not None and state[0] != idle:       # idle since the last change (or the accept)
                self._connections[connection] = (idle, time.monotonic())

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    def process_request(self, request, client_address) -> None:
        with self._connections_lock:
            full = len(self._connections) >= self.max_connections
            idle = [(since, c) for c, (is_idle, since) in self._connections.items() if is_idle] if full else []
            if full and idle:
                victim = min(idle, key=lambda entry: entry[0])[1]
                del self._connections[victim]
                try:
                    victim.shutdown(socket.SHUT_RDWR)    # its thread's read returns: that thread ends
                except OSError:
                    pass
            if not full or idle:
                self._connections[request] = (True, time.monotonic())
        if full and not idle:            # answered from a short thread: the accept loop never waits on a client
            return threading.Thread(target=self._refuse, args=(request,), name="trnlab-http-refuse", daemon=True).start()
        super().process_request(request, client_address)

    def _refuse(self, request: socket.socket) -> None:
        body = json.dumps(APIError(503, f"the server is at its limit of {self.max_connections} connections, all "
                                        f"busy: retry later", None, "too_many_connections", "server_error").body())
        try:
            request.settimeout(1.0)
            request.sendall(f"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                            f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
                            f"{body}".encode())
            request.shutdown(socket.SHUT_WR)
            request.recv(65536)              # the unread request, so that closing does not reset the answer
        except OSError:
            pass
        self.shutdown_request(request)

    def shutdown_request(self, request) -> None:
        with self._connections_lock:
            self._connections.pop(request, None)
        super().shutdown_request(request)


def make_server(service: Service, host: str = "127.0.0.1", port: int = 8000, timeout: float = TIMEOUT_S,
                max_connections: int = MAX_CONNECTIONS) -> Server:
    """A server bound to host:port (port 0: a free one, see server.server_address) for `service`;
    `timeout` bounds every socket read and write, `max_connections` the open connections."""
    check_server_options(port, timeout, max_connections)
    handler = type("BoundHandler", (Handler,), {"service": service, "timeout": timeout})
    return Server((host, port), handler, max_connections)


def check_server_options(port: int, timeout: float, max_connections: int) -> None:
    """Refuse options a server cannot work with, naming the option, its value and the allowed range."""
    if not 0 <= port <= 65535:
        raise ValueError(f"--port {port}: a TCP port is in 0..65535 (0: any free port)")
    if not (timeout > 0 and timeout < float("inf")):
        raise ValueError(f"--timeout {timeout}: the socket time-out must be a number of seconds > 0")
    if max_connections < 1:
        raise ValueError(f"--max-connections {max_connections}: at least 1 connection")


class BackgroundServer:
    """A server in a background thread (notebooks, tests): `with BackgroundServer(service) as url: ...`."""

    def __init__(self, service: Service, host: str = "127.0.0.1", port: int = 0, **options):
        self.service = service
        self.server = make_server(service, host, port, **options)
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
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds a socket read or write may wait")
    parser.add_argument("--max-connections", type=int, default=MAX_CONNECTIONS, help="open connections at most")
    parser.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT)
    args = parser.parse_args(argv)
    try:                                   # every argument checked before the model is loaded
        check_server_options(args.port, args.timeout, args.max_connections)
        if not 1 <= args.max_batch <= MAX_BATCH:
            raise ValueError(f"--max-batch {args.max_batch}: the running batch holds 1..{MAX_BATCH} sequences")
        service = Service(args.device, args.checkpoint, max_batch=args.max_batch)
        server = make_server(service, args.host, args.port, args.timeout, args.max_connections)
    except (ValueError, OSError) as error:   # a bad value, a missing checkpoint, a port in use
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    service.start()
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
