"""A server one request cannot break: validation that matches what sampling can take, a failing
request that fails alone, every bad input a JSON 4xx (never a dropped connection), a 413 before the
body, read and idle time-outs, a connection limit, /health that reflects the ability to answer, a
cache that cannot be written, and argument errors as messages."""
from __future__ import annotations

import http.client
import json
import socket
import socketserver
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trnlab.model import ask, load_checkpoint
from trnlab.serve import http as serve_http
from trnlab.serve.backend import CpuBackend
from trnlab.serve.engine import Engine, Request
from trnlab.serve.http import BackgroundServer
from trnlab.serve.sampling import SamplingParams, next_token
from trnlab.serve.service import Service

MODEL_NAME = "trnlab-tiny-gpt"
MODEL, TOKENIZER = load_checkpoint()


@pytest.fixture(scope="module")
def server():
    background = BackgroundServer(Service("trn2", max_batch=8, model=MODEL, tokenizer=TOKENIZER),
                                  timeout=1.0, max_connections=64).start()
    yield background
    background.stop()


def cpu_server(**options) -> BackgroundServer:
    return BackgroundServer(Service("cpu", max_batch=8, model=MODEL, tokenizer=TOKENIZER), **options).start()


def raw_exchange(server, data: bytes, wait_s: float = 10.0) -> bytes:
    """Send raw bytes, read until the server closes (or `wait_s`): what a client really receives."""
    host, port = server.server.server_address[:2]
    with socket.create_connection((host, port), timeout=wait_s) as s:
        s.sendall(data)
        received = b""
        try:
            s.shutdown(socket.SHUT_WR)                                  # all sent: the server sees the end
        except OSError:
            pass                                                        # the server has answered and closed
        try:
            while chunk := s.recv(65536):
                received += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    return received


def post_raw(body: bytes, content_length: str | None = None) -> bytes:
    length = str(len(body)) if content_length is None else content_length
    return (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + length.encode() + b"\r\n\r\n" + body)


def json_answer(received: bytes) -> tuple[int, dict]:
    assert received, "the connection was dropped without an answer"
    head, _, body = received.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    return status, json.loads(body)


def completion(server, **fields) -> tuple[int, dict]:
    """POST /v1/completions to `server` (a BackgroundServer or its URL) -> (status, JSON body)."""
    url = server if isinstance(server, str) else server.url
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=120)
    connection.request("POST", "/v1/completions", json.dumps({"model": MODEL_NAME, **fields}),
                       {"Content-Type": "application/json"})
    response = connection.getresponse()
    answer = response.status, json.loads(response.read())
    connection.close()
    return answer


# -- sampling takes everything validation accepts; a failing request fails alone --------------------------
@settings(max_examples=200, deadline=None)
@given(temperature=st.floats(0.0, 2.0), top_p=st.floats(0.0, 1.0, exclude_min=True),
       top_k=st.integers(0, 10 ** 6), seed=st.integers(0, 2 ** 64 - 1),
       logits=st.lists(st.floats(-1e4, 1e4), min_size=2, max_size=50))
def test_every_sampling_value_the_api_accepts_gives_a_token(temperature, top_p, top_k, seed, logits):
    params = SamplingParams(temperature, top_k, top_p, seed)
    token = next_token(np.array(logits, np.float32), params, np.random.default_rng(seed))
    assert 0 <= token < len(logits)


def test_a_subnormal_temperature_samples_the_most_likely_token():
    logits = np.array([1.0, 3.0, 2.0], np.float32)
    assert next_token(logits, SamplingParams(5e-324, seed=0), np.random.default_rng(0)) == 1


class PoisonedBackend(CpuBackend):
    """NaN logits for prompts that start with token `poison` (the model failing on one request)."""

    poison = TOKENIZER.encode("9")[0]

    def prefill(self, tokens, slot, cache):
        result = super().prefill(tokens, slot, cache)
        if tokens[1] == self.poison:
            result.logits = np.full_like(result.logits, np.nan)
        return result


def test_a_request_whose_sampling_fails_fails_alone():
    prompts = ["12+5", "407+38", "reverse kite", "999-1", "sort 52819", "35+56", "reverse ab", "512-87"]
    engine = Engine(PoisonedBackend(MODEL, max_batch=8), TOKENIZER.eos_id, max_batch=8)
    requests = [engine.submit(Request(TOKENIZER.encode_prompt(p), SamplingParams(temperature=1.0, seed=1)))
                for p in prompts]
    engine.run()                                                       # no exception escapes the step
    failed = [r for r in requests if r.finish_reason == "error"]
    assert [r.prompt_ids for r in failed] == [TOKENIZER.encode_prompt("999-1")]
    assert "no distribution" in str(failed[0].error) and failed[0].slot is None
    assert all(r.finish_reason == "stop" for r in requests if r not in failed)
    assert engine.idle and sorted(engine.free_slots) == list(range(8))


def test_a_tiny_temperature_among_innocent_requests_fails_nobody(server):
    prompts = ["12+5", "407+38", "999-1", "reverse kite", "sort 52819", "35+56", "reverse ab"]
    with ThreadPoolExecutor(8) as pool:
        tiny = pool.submit(completion, server, prompt="sort 5213", temperature=5e-324, seed=1)
        innocent = list(pool.map(lambda p: completion(server, prompt=p), prompts))
    assert [status for status, _ in innocent] == [200] * len(prompts)
    assert [body["choices"][0]["text"] for _, body in innocent] == [ask(MODEL, TOKENIZER, p) for p in prompts]
    status, body = tiny.result()
    assert status == 200 and body["choices"][0]["text"] == ask(MODEL, TOKENIZER, "sort 5213")   # T → 0: greedy


@pytest.mark.parametrize("field, value", [("seed", -1), ("seed", 2 ** 64), ("top_k", -3)])
def test_out_of_range_sampling_values_are_400(server, field, value):
    status, body = completion(server, prompt="1+1", **{field: value})
    assert status == 400 and body["error"]["param"] == field and body["error"]["code"] == "invalid_value"


# -- every bad input a JSON 4xx, never a dropped connection ---------------------------------------------------
BAD_BYTES = [  # (raw request, status, code)
    (post_raw(json.dumps({"model": MODEL_NAME, "prompt": "1" * 5000 + "+1"}).encode()), 400, "context_length_exceeded"),
    (post_raw(json.dumps({"model": MODEL_NAME, "prompt": "²+1"}).encode()), 400, "unknown_character"),
    (post_raw(b"[" * 30000), 400, "invalid_json"),
    (post_raw(b'{"model": "m", "max_tokens": ' + b"7" * 5000 + b"}"), 400, "invalid_json"),
    (post_raw(b"{}", content_length="\u00b2".encode().decode("latin-1")), 400, "invalid_request"),
    (post_raw(b"{}", content_length="-1"), 400, "invalid_request"),
    (post_raw(b'{"model": 1}', content_length="100"), 400, "invalid_request"),    # the body ends early
    (b"GET / HTTP/9\r\n\r\n", 400, "invalid_request"),
    (b"GET /health HTTP/1.1\r\n" + b"X-Long: " + b"a" * 70000 + b"\r\n\r\n", 431, "invalid_request"),
    (b"DELETE /v1/completions HTTP/1.1\r\n\r\n", 501, "invalid_request"),
]


@pytest.mark.parametrize("data, status, code", BAD_BYTES, ids=[
    "5000-digit-operand", "superscript-digit", "30000-nested-arrays", "5000-digit-number", "content-length-superscript",
    "negative-content-length", "short-body", "bad-http-version", "huge-header", "unknown-method"])
def test_every_bad_input_gets_a_json_answer_not_a_dropped_connection(server, data, status, code):
    got_status, body = json_answer(raw_exchange(server, data))
    assert (got_status, body["error"]["code"]) == (status, code), body
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert completion(server, prompt="12+5")[1]["choices"][0]["text"] == "17"       # and the server goes on


def test_a_413_is_sent_before_the_body_is_read(server):
    head = post_raw(b"", content_length=str(10 ** 9))                   # announces 1 GB, sends none of it
    started = time.monotonic()
    status, body = json_answer(raw_exchange(server, head, wait_s=20))
    assert status == 413 and body["error"]["code"] == "request_too_large"
    assert time.monotonic() - started < 10


def test_an_oversized_body_with_expect_100_continue_is_refused_instead_of_continued(server):
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\nExpect: 100-continue\r\n\r\n")
    received = raw_exchange(server, head)
    assert not received.startswith(b"HTTP/1.1 100") and json_answer(received)[0] == 413


def test_the_official_client_gets_a_413_for_a_large_body(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="not-needed", max_retries=0)
    with pytest.raises(openai.APIStatusError) as error:
        client.completions.create(model=MODEL_NAME, prompt="1" * (serve_http.MAX_BODY_BYTES + 1))
    assert error.value.status_code == 413


# -- time-outs and the connection limit ---------------------------------------------------------------------------
def test_a_connection_that_sends_nothing_is_closed_after_the_time_out(server):
    host, port = server.server.server_address[:2]
    with socket.create_connection((host, port), timeout=15) as s:
        started = time.monotonic()
        assert s.recv(1) == b""                                         # the server hung up
        assert time.monotonic() - started < 10
    with socket.create_connection((host, port), timeout=15) as s:       # half a request, then silence
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 50\r\n\r\n{\"mo")
        status, body = json_answer(s.recv(65536) + s.recv(65536))
        assert status == 408 and body["error"]["code"] == "request_timeout"


def test_past_the_connection_limit_the_longest_idle_connection_gives_way():
    background = cpu_server(timeout=30, max_connections=3)
    host, port = background.server.server_address[:2]
    try:
        idle = [socket.create_connection((host, port), timeout=15) for _ in range(3)]
        time.sleep(0.2)
        assert completion(background, prompt="12+5")[1]["choices"][0]["text"] == "17"
        assert idle[0].recv(1) == b""                                   # the oldest idle one was closed
        for s in idle:
            s.close()
    finally:
        background.stop()


def test_past_the_connection_limit_with_every_connection_busy_the_answer_is_503():
    background = cpu_server(timeout=30, max_connections=2)
    host, port = background.server.server_address[:2]
    try:
        busy = [socket.create_connection((host, port), timeout=15) for _ in range(2)]
        for s in busy:                                                   # each is mid-request: not idle
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 50\r\n\r\n{")
        time.sleep(0.3)
        status, body = json_answer(raw_exchange(background, post_raw(b"{}")))
        assert status == 503 and body["error"]["code"] == "too_many_connections"
        for s in busy:
            s.close()
    finally:
        background.stop()


def test_three_hundred_idle_connections_do_not_stop_a_request():
    background = cpu_server()
    host, port = background.server.server_address[:2]
    try:
        idle = [socket.create_connection((host, port), timeout=15) for _ in range(300)]
        started = time.monotonic()
        assert completion(background, prompt="12+5")[1]["choices"][0]["text"] == "17"
        assert time.monotonic() - started < 10
        for s in idle:
            s.close()
    finally:
        background.stop()


# -- health and the cache -----------------------------------------------------------------------------------------
def test_an_unwritable_cache_still_answers_and_health_says_so(tmp_path, monkeypatch):
    from trnlab.serve import steps as compiled
    monkeypatch.setattr(compiled, "_STEPS", {})                         # nothing compiled yet in this process
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("TRNLAB_CACHE", str(blocker))
    service = Service("trn2", max_batch=1, model=MODEL, tokenizer=TOKENIZER)
    with pytest.warns(RuntimeWarning, match="cannot be written"):
        with BackgroundServer(service, timeout=5.0) as url:
            status, body = completion(url, prompt="12+5")
            assert status == 200 and body["choices"][0]["text"] == "17"
            health = json.loads(http_get(url + "/health"))
    assert health["status"] == "ok" and "cannot be written" in health["warnings"][0]


def http_get(url: str) -> bytes:
    import urllib.error
    import urllib.request
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.read()
    except urllib.error.HTTPError as error:
        return error.read()


class BrokenBackend(CpuBackend):
    def _decode_forward(self, *args):
        raise RuntimeError("the device is gone")


def test_health_reports_an_engine_that_cannot_answer():
    service = Service("cpu", max_batch=2, model=MODEL, tokenizer=TOKENIZER)
    service.backend = BrokenBackend(MODEL, max_batch=8)
    service.engine = Engine(service.backend, TOKENIZER.eos_id, max_batch=2)
    with BackgroundServer(service, timeout=5.0) as url:
        assert json.loads(http_get(url + "/health"))["status"] == "ok"
        status, body = completion(url, prompt="12+5")
        assert status == 500 and "the device is gone" in body["error"]["message"]
        health = json.loads(http_get(url + "/health"))
    assert health["status"] == "error" and "the device is gone" in health["problems"][0]


# -- arguments ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, says", [
    (["--max-batch", "0"], "--max-batch 0: the running batch holds 1..1024"),
    (["--max-batch", "1000000000"], "--max-batch 1000000000"),
    (["--port", "70000"], "--port 70000: a TCP port is in 0..65535"),
    (["--timeout", "0"], "--timeout 0.0"),
    (["--timeout", "nan"], "--timeout nan"),
    (["--max-connections", "0"], "--max-connections 0"),
    (["--checkpoint", "/nonexistent/ckpt", "--port", "0"], "no checkpoint in /nonexistent/ckpt"),
])
def test_bad_serve_arguments_are_messages_not_tracebacks_and_no_server_starts(argv, says, capsys, monkeypatch):
    monkeypatch.setattr(socketserver.BaseServer, "serve_forever", lambda self, *a: pytest.fail("a server started"))
    with pytest.raises(SystemExit) as exit_:
        serve_http.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


