"""Continuous batching: requests join and leave the running decode batch between steps, as in vLLM.

A static batch waits for its slowest sequence; here every `step()`

    1. admits waiting requests that have arrived, while KV-cache slots are free: each is prefilled
       (its prompt's keys and values go into its slot) and gets its first token;
    2. runs one decode step for every running request (the new ones included): one token each;
    3. lets finished requests leave (<eos>, max_tokens, or the context is full) and frees their slots,
       so the next step can admit someone else.

Time is the simulated device time of the steps (`clock_ns`); a request's arrival is a moment on
that clock. Per request the engine records when each output token was produced, which gives AWS's
metrics (NxD Inference, "LLM Inference benchmarking guide"):

    TTFT      first token − arrival (queueing + prefill)
    TPOT      (last token − first token) / (output tokens − 1): time per output token after the first
    E2E       last token − arrival  =  TTFT + TPOT × (output tokens − 1)

AWS's guide writes end-to-end = TTFT + TPOT × (number of output tokens); with TPOT excluding the
first token, as it is measured here and by LLMPerf, the exact identity has (output tokens − 1).
Output tokens include the <eos> that ends an answer (producing it costs a decode step).

A request fails alone: if its prefill or its sampling raises, it leaves with finish_reason "error"
(the exception on `Request.error` and on its last event) and the other requests of the step go on.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from trnlab.serve.backend import Backend
from trnlab.serve.kv_cache import KVCache
from trnlab.serve.sampling import SamplingParams, next_token, request_rng


@dataclass(eq=False)       # a request is itself: compared by identity
class Request:
    prompt_ids: list[int]                     # <bos> prompt <sep>, as the model reads it
    params: SamplingParams = SamplingParams()
    arrival_ns: float = 0.0                   # simulated moment the request arrives
    id: str = ""
    output_ids: list[int] = field(default_factory=list)
    token_ns: list[float] = field(default_factory=list)   # simulated moment each output token was produced
    finish_reason: str | None = None          # "stop" (<eos>) | "length" (max_tokens, context) | "cancelled" | "error"
    error: Exception | None = None            # why it failed (finish_reason "error")
    slot: int | None = None
    rng: np.random.Generator | None = field(default=None, repr=False)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def ttft_ns(self) -> float:
        return self.token_ns[0] - self.arrival_ns

    @property
    def tpot_ns(self) -> float:
        """Mean time per output token after the first (0 for a one-token answer)."""
        n = len(self.token_ns)
        return (self.token_ns[-1] - self.token_ns[0]) / (n - 1) if n > 1 else 0.0

    @property
    def e2e_ns(self) -> float:
        return self.token_ns[-1] - self.arrival_ns

    def latency(self) -> dict:
        """The request's simulated latency breakdown in milliseconds (plain data for JSON)."""
        n = len(self.token_ns)
        return {"ttft_ms": self.ttft_ns / 1e6, "tpot_ms": self.tpot_ns / 1e6, "e2e_ms": self.e2e_ns / 1e6,
                "output_tokens": n,
                "output_tokens_per_s": n / (self.e2e_ns / 1e9) if self.e2e_ns > 0 else None}


@dataclass(frozen=True)
class StepRecord:
    """One step on the device, for the timeline."""
    kind: str                 # "prefill" | "decode"
    start_ns: float
    end_ns: float
    request_ids: tuple[str, ...]
    bucket: tuple[int, int]   # (batch, positions) of the compiled shape


@dataclass(frozen=True)
class TokenEvent:
    """A token produced for a request; `finish_reason` is set on the request's last event."""
    request: Request
    token_id: int                             # -1 on a failed request's last event
    finish_reason: str | None
    error: Exception | None = None            # set when finish_reason is "error"


class Engine:
    """The scheduler: a waiting queue, a running batch of at most `max_batch`, one KV-cache slot each."""

    def __init__(self, backend: Backend, eos_id: int, max_batch: int = 8):
        if not 1 <= max_batch <= backend.max_batch:
            raise ValueError(f"max_batch={max_batch}: the running batch holds 1..{backend.max_batch} sequences "
                             f"(the backend's largest batch bucket)")
        self.backend = backend
        self.config = backend.config
        self.eos_id = eos_id
        self.max_batch = max_batch
        self.cache = KVCache.empty(self.config, max_batch)
        self.free_slots = list(range(max_batch))
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.clock_ns = 0.0
        self.steps: list[StepRecord] = []
        self._ids = itertools.count()

    # -- requests in and out -----------------------------------------------------------------------
    def submit(self, request: Request) -> Request:
        n = len(request.prompt_ids)
        if not 0 < n < self.config.block_size:          # at least one position must be left for the answer
            raise ValueError(f"prompt of {n} tokens: the context of {self.config.block_size} tokens leaves room for "
                             f"prompts of 1..{self.config.block_size - 1}")
        if request.finished or request.output_ids:
            raise ValueError(f"request {request.id!r} was already served")
        if not request.id:
            request.id = f"req-{next(self._ids)}"
        request.rng = request_rng(request.params)
        # the queue is kept in arrival order (first come, first served); equal arrivals keep submission order
        place = len(self.waiting)
        while place > 0 and self.waiting[place - 1].arrival_ns > request.arrival_ns:
            place -= 1
        self.waiting.insert(place, request)
        return request

    def cancel(self, request: Request) -> bool:
        """Take a request out (a client that went away); True if it was still waiting or running."""
        if request in self.waiting:
            self.waiting.remove(request)
        elif request in self.running:
            self._leave(request)
        else:
            return False
        request.finish_reason = "cancelled"
        return True

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    # -- one step ----------------------------------------------------------------------------------
    def step(self) -> list[TokenEvent]:
        """Admit, prefill, decode once, retire. Returns the tokens produced, in order."""
        events: list[TokenEvent] = []
        if not self.running and self.waiting and self.waiting[0].arrival_ns > self.clock_ns:
            self.clock_ns = self.waiting[0].arrival_ns                   # nothing to do until someone arrives
        for request in self._arrived():
            request.slot = self.free_slots.pop(0)
            self.running.append(request)
            try:
                result = self.backend.prefill(request.prompt_ids, request.slot, self.cache)
            except Exception as error:                                   # this request's prompt alone
                events.append(self._fail(request, error))
                continue
            self._record("prefill", result, [request])
            events.append(self._emit(request, result.logits[0]))
        decoding = [r for r in self.running if not r.finished]
        if decoding:
            result = self.backend.decode([r.output_ids[-1] for r in decoding], [r.slot for r in decoding], self.cache)
            self._record("decode", result, decoding)
            events += [self._emit(r, logits) for r, logits in zip(decoding, result.logits)]
        for request in [r for r in self.running if r.finished]:
            self._leave(request)
        return events

    def run(self) -> list[TokenEvent]:
        """Step until every submitted request is answered."""
        events = []
        while not self.idle:
            events += self.step()
        return events

    # -- helpers -----------------------------------------------------------------------------------
    def _arrived(self):
        while self.waiting and self.free_slots and self.waiting[0].arrival_ns <= self.clock_ns:
            yield self.waiting.popleft()

    def _record(self, kind: str, result, requests: list[Request]) -> None:
        start = self.clock_ns
        self.clock_ns += result.simulated_ns
        self.steps.append(StepRecord(kind, start, self.clock_ns, tuple(r.id for r in requests), result.bucket))

    def _fail(self, request: Request, error: Exception) -> TokenEvent:
        request.finish_reason, request.error = "error", error
        return TokenEvent(request, -1, "error", error)

    def _emit(self, request: Request, logits: np.ndarray) -> TokenEvent:
        try:
            token = next_token(logits, request.params, request.rng)
        except Exception as error:                   # fails this request only; it leaves at the end of the step
            return self._fail(request, error)
        request.output_ids.append(token)
        request.token_ns.append(self.clock_ns)
        limit = request.params.max_tokens
        if token == self.eos_id:
            request.finish_reason = "stop"
        elif (limit is not None and len(request.output_ids) >= limit) or \
                len(request.prompt_ids) + len(request.output_ids) > self.config.block_size:
            request.finish_reason = "length"          # max_tokens reached, or no position left to read it at
        return TokenEvent(request, token, request.finish_reason)

    def _leave(self, request: Request) -> None:
        self.running.remove(request)
        self.cache.reset(request.slot)
        self.free_slots.append(request.slot)
        request.slot = None


def generate(backend: Backend, prompts_ids: list[list[int]], eos_id: int, params: SamplingParams = SamplingParams(),
             max_batch: int = 8) -> list[Request]:
    """Answer every prompt (all arriving at time 0) with continuous batching; requests in prompt order."""
    engine = Engine(backend, eos_id, max_batch=max_batch)
    requests = [engine.submit(Request(list(ids), params)) for ids in prompts_ids]
    engine.run()
    return requests
