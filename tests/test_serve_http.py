"""The OpenAI-compatible server, started for real on a free loopback port: answers, streaming, every
kind of bad input in OpenAI's error shape (and the server keeps serving), a client that leaves
mid-stream, and 20 concurrent requests all answered correctly — through a plain HTTP client and
through the official `openai` client."""
from __future__ import annotations

import http.client
import json
import socket
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from trnlab.model import ask, load_checkpoint
from trnlab.serve.http import MAX_BODY_BYTES, BackgroundServer
from trnlab.serve.service import Service

MODEL_NAME = "trnlab-tiny-gpt"
MODEL, TOKENIZER = load_checkpoint()


@pytest.fixture(scope="module")
def server():
    background = BackgroundServer(Service("trn2", max_batch=8, model=MODEL, tokenizer=TOKENIZER)).start()
    yield background
    background.stop()


def request(server, method: str, path: str, body=None, raw: bytes | None = None, headers=None):
    host, port = server.server.server_address[:2]
    connection = http.client.HTTPConnection(host, port, timeout=60)
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    connection.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
    response = connection.getresponse()
    text = response.read().decode()
    connection.close()
    return response.status, response.getheader("Content-Type"), text


def post(server, path, body=None, **kw):
    status, _, text = request(server, "POST", path, body, **kw)
    return status, json.loads(text)


def assert_openai_error(status, body, expected_status, param=None, says=""):
    assert status == expected_status, body
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["param"] == param
    assert says in body["error"]["message"]


def test_health_and_models(server):
    status, _, text = request(server, "GET", "/health")
    assert status == 200 and json.loads(text)["status"] == "ok"
    status, _, text = request(server, "GET", "/v1/models")
    assert status == 200 and [m["id"] for m in json.loads(text)["data"]] == [MODEL_NAME]


def test_completion_answers_like_pytorch_and_carries_the_simulated_latency(server):
    status, body = post(server, "/v1/completions", {"model": MODEL_NAME, "prompt": "407+38"})
    assert status == 200 and body["object"] == "text_completion"
    assert body["choices"][0]["text"] == ask(MODEL, TOKENIZER, "407+38") == "445"
    assert body["choices"][0]["finish_reason"] == "stop"
    latency = body["trnlab"]
    assert latency["device"] == "trn2" and latency["simulated"]
    assert 0 < latency["ttft_ms"] < latency["e2e_ms"]
    n = latency["output_tokens"]
    assert n == body["usage"]["completion_tokens"] == len("5440") + 1       # written 0445 units first, then <eos>
    assert latency["e2e_ms"] == pytest.approx(latency["ttft_ms"] + latency["tpot_ms"] * (n - 1))


def test_max_tokens_cuts_the_answer_with_finish_reason_length(server):
    status, body = post(server, "/v1/completions", {"model": MODEL_NAME, "prompt": "reverse kite", "max_tokens": 2})
    assert status == 200 and body["choices"][0] == {"index": 0, "text": "et", "logprobs": None,
                                                    "finish_reason": "length"}


def read_events(server, path, body):
    status, content_type, text = request(server, "POST", path, body)
    assert status == 200 and content_type == "text/event-stream"
    lines = [line for line in text.split("\n\n") if line]
    assert all(line.startswith("data: ") for line in lines)
    assert lines[-1] == "data: [DONE]"
    return [json.loads(line[len("data: "):]) for line in lines[:-1]]


def test_streaming_completion_is_server_sent_events_ending_in_done(server):
    chunks = read_events(server, "/v1/completions", {"model": MODEL_NAME, "prompt": "reverse kite", "stream": True})
    assert "".join(c["choices"][0]["text"] for c in chunks) == ask(MODEL, TOKENIZER, "reverse kite")
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "stop"
    assert "trnlab" in chunks[-1] and "ttft_ms" in chunks[-1]["trnlab"]


def test_streaming_chat_sends_the_role_then_content_deltas(server):
    chunks = read_events(server, "/v1/chat/completions",
                         {"model": MODEL_NAME, "stream": True, "messages": [{"role": "user", "content": "sort 52819"}]})
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == ask(MODEL, TOKENIZER, "sort 52819")


BAD_INPUTS = [  # (path, body or raw bytes, status, param, words the message must contain)
    ("/v1/completions", b"{not json", 400, None, "could not parse the JSON body"),
    ("/v1/completions", b"[1, 2]", 400, None, "must be an object"),
    ("/v1/completions", {"prompt": "1+1"}, 400, "model", "'model'"),
    ("/v1/completions", {"model": MODEL_NAME}, 400, "prompt", "'prompt'"),
    ("/v1/completions", {"model": MODEL_NAME, "prompt": 12}, 400, "prompt", "expected a string"),
    ("/v1/completions", {"model": MODEL_NAME, "prompt": "1+1", "max_tokens": "5"}, 400, "max_tokens", "integer"),
    ("/v1/completions", {"model": MODEL_NAME, "prompt": "1+1", "max_tokens": True}, 400, "max_tokens", "integer"),
    ("/v1/completions", {"model": MODEL_NAME, "prompt": "1+1", "temperature": 9}, 400, "temperature", "[0, 2]"),
    ("/v1/completions", {"model": MODEL_NAME, "prompt": "1+1", "stream": "yes"}, 400, "stream", "boolean"),
    ("/v1/chat/completions", {"model": MODEL_NAME}, 400, "messages", "'messages'"),
    ("/v1/chat/completions", {"model": MODEL_NAME, "messages": [{"role": "user"}]}, 400, "messages[0]", "content"),
    ("/v1/completions", {"model": MODEL_NAME, "prompt": "reverse " + "a" * 40}, 400, "prompt",
     "maximum context length is 32 tokens"),
    ("/v1/completions", {"model": MODEL_NAME, "prompt": "12*5"}, 400, "prompt", "unknown character '*'"),
    ("/v1/completions", {"model": "gpt-4", "prompt": "1+1"}, 404, "model", "'gpt-4' does not exist"),
    ("/v1/nothing", {"model": MODEL_NAME}, 404, None, "unknown path"),
    ("/v1/completions", {"model": MODEL_NAME, "prompt": "1" * (MAX_BODY_BYTES + 1)}, 413, None,
     f"at most {MAX_BODY_BYTES:,}"),
]


@pytest.mark.parametrize("path, body, status, param, says", BAD_INPUTS,
                         ids=[case[-1][:30] for case in BAD_INPUTS])
def test_bad_input_gets_an_openai_error_and_the_server_keeps_serving(server, path, body, status, param, says):
    if isinstance(body, bytes):
        got_status, got = post(server, path, raw=body)
    else:
        got_status, got = post(server, path, body)
    assert_openai_error(got_status, got, status, param, says)
    assert request(server, "GET", "/health")[0] == 200


def test_after_every_bad_input_the_server_still_answers(server):
    for path, body, *_ in BAD_INPUTS:
        post(server, path, raw=body) if isinstance(body, bytes) else post(server, path, body)
    assert post(server, "/v1/completions", {"model": MODEL_NAME, "prompt": "12+5"})[1]["choices"][0]["text"] == "17"


def test_a_client_leaving_mid_stream_frees_its_place(server):
    host, port = server.server.server_address[:2]
    body = json.dumps({"model": MODEL_NAME, "prompt": "reverse abcdefghijklmnop", "stream": True}).encode()
    with socket.create_connection((host, port), timeout=30) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        assert s.recv(64).startswith(b"HTTP/1.0 200")                    # the stream has begun; now hang up
    status, body = post(server, "/v1/completions", {"model": MODEL_NAME, "prompt": "999-1"})
    assert status == 200 and body["choices"][0]["text"] == "998"
    engine = server.service.engine
    assert len(engine.running) + len(engine.free_slots) == engine.max_batch   # no slot leaked


PROMPTS = ["12+5", "407+38", "999-1", "reverse kite", "sort 52819", "35+56", "reverse ab", "sort 000",
           "512-87", "0+50"] * 2


def test_twenty_concurrent_requests_are_all_answered_correctly(server):
    expected = [ask(MODEL, TOKENIZER, p) for p in PROMPTS]

    def one(prompt):
        return post(server, "/v1/completions", {"model": MODEL_NAME, "prompt": prompt})

    with ThreadPoolExecutor(20) as pool:
        results = list(pool.map(one, PROMPTS))
    assert all(status == 200 for status, _ in results)
    assert [body["choices"][0]["text"] for _, body in results] == expected
    assert len({body["id"] for _, body in results}) == 20                   # 20 answers, none twice


def test_the_official_openai_client_works_against_it(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="not-needed", max_retries=0)
    assert [m.id for m in client.models.list()] == [MODEL_NAME]
    completion = client.completions.create(model=MODEL_NAME, prompt="407+38")
    assert completion.choices[0].text == "445" and completion.model_extra["trnlab"]["ttft_ms"] > 0
    chat = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "reverse kite"}])
    assert chat.choices[0].message.content == ask(MODEL, TOKENIZER, "reverse kite")
    stream = client.chat.completions.create(model=MODEL_NAME, stream=True,
                                            messages=[{"role": "user", "content": "sort 52819"}])
    assert "".join(c.choices[0].delta.content or "" for c in stream) == ask(MODEL, TOKENIZER, "sort 52819")
    seeded = [client.completions.create(model=MODEL_NAME, prompt="sort 5213", temperature=1.5, seed=3,
                                        top_p=0.9).choices[0].text for _ in range(2)]
    assert seeded[0] == seeded[1]
    with pytest.raises(openai.NotFoundError) as error:
        client.completions.create(model="gpt-4", prompt="1+1")
    assert error.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError, match="unknown character"):
        client.completions.create(model=MODEL_NAME, prompt="12*5")


def test_the_serve_command_starts_a_server_on_the_port_it_is_given():
    import subprocess
    import sys
    import time
    import urllib.request

    from trnlab import REPO_ROOT

    with socket.socket() as s:                                   # a free loopback port
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "trnlab", "serve", "--host", "127.0.0.1", "--port", str(port),
                                "--device", "cpu"], cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 90
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
                    assert json.loads(response.read())["device"] == "cpu"
                    break
            except OSError:
                assert process.poll() is None and time.time() < deadline, process.stderr.read().decode()[-2000:]
                time.sleep(0.5)
        body = json.dumps({"model": MODEL_NAME, "prompt": "12+5"}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert json.loads(response.read())["choices"][0]["text"] == "17"
    finally:
        process.terminate()
        process.wait(timeout=30)
