"""The model as a service: prompts in, answers and their simulated latency out.

`Service` ties the checkpoint's model and tokenizer to a backend and a continuous-batching engine
running in a background thread (`submit` from any thread, tokens come back on a queue per request).
`ask` / `Service.ask` answer one prompt and wait; the HTTP server and `python -m trnlab ask` use
this module, so they speak the same prompts, errors and latency breakdown.

The prompt is what a student types ("407+38", "reverse kite"); it is rewritten into the model's
template (trnlab.data.tasks.model_prompt) and the answer back into the usual form (read_answer).

One request cannot break the others: a request whose prompt or sampling fails gets its own error and
the step goes on (trnlab.serve.engine); only a step that fails as a whole fails its batch, and then
`health()` says so until a step succeeds again. Memory stays bounded under sustained load: the
simulator pauses Python's cyclic collector while it replays a program and schedules the full
collections itself (trnlab.hardware._gc); `benchmarks/bench_serve.py --soak` measures the resident
memory.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from trnlab.data.tasks import NUMBER_TASKS, model_prompt, read_answer, task_of
from trnlab.model.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint
from trnlab.model.generate import check_prompt_fits
from trnlab.serve.backend import make_backend
from trnlab.serve.engine import Engine, Request, TokenEvent
from trnlab.serve.sampling import SamplingParams

@dataclass
class Answer:
    prompt: str
    text: str
    finish_reason: str
    request: Request
    device: str
    wall_s: float

    def latency(self) -> dict:
        return {"device": self.device, **self.request.latency(), "wall_s": self.wall_s}

    def latency_line(self) -> str:
        """One line for people: the simulated latency breakdown (and the wall time it took to simulate)."""
        lat = self.request.latency()
        if self.device == "cpu":
            return f"cpu: no simulated time; {lat['output_tokens']} tokens in {self.wall_s * 1e3:.0f} ms wall"
        return (f"simulated {self.device}: TTFT {lat['ttft_ms'] * 1e3:.1f} µs, "
                f"TPOT {lat['tpot_ms'] * 1e3:.1f} µs, end-to-end {lat['e2e_ms'] * 1e3:.1f} µs "
                f"for {lat['output_tokens']} tokens; wall {self.wall_s * 1e3:.0f} ms")


class Service:
    """One model on one device, answering requests from many threads through one engine."""

    def __init__(self, device: str = "trn2", checkpoint: Path = DEFAULT_CHECKPOINT, max_batch: int = 8,
                 model=None, tokenizer=None, model_name: str = "trnlab-tiny-gpt"):
        if model is None:
            model, tokenizer = load_checkpoint(checkpoint)
        self.model, self.tokenizer = model, tokenizer
        self.device = device
        self.model_name = model_name
        self.backend = make_backend(device, model, max_batch=max(8, max_batch))
        self.engine = Engine(self.backend, tokenizer.eos_id, max_batch=max_batch)
        self._inbox: queue.Queue = queue.Queue()
        self._listeners: dict[Request, queue.Queue] = {}
        self._worker: threading.Thread | None = None
        self._stop = threading.Event()
        self.last_step_error: str | None = None    # the last failed step's error, until a step succeeds

    @property
    def context(self) -> int:
        return self.model.config.block_size

    # -- prompts ---------------------------------------------------------------------------------
    def encode(self, prompt: str) -> list[int]:
        """<bos> prompt <sep> in the model's template; raises UnknownCharacterError / PromptTooLongError."""
        try:
            text = model_prompt(task_of(prompt), prompt)
        except ValueError:            # not an operand int() can read ("²+1", 5,000 digits): tokenize as typed
            text = prompt
        ids = self.tokenizer.encode_prompt(text)
        check_prompt_fits(self.model, ids, prompt)
        return ids

    def text_of(self, prompt: str, output_ids: list[int]) -> str:
        """The answer as the user reads it (the template undone)."""
        return read_answer(task_of(prompt), self.tokenizer.decode_answer(output_ids))

    def text_so_far(self, prompt: str, output_ids: list[int], finished: bool) -> str:
        """What can be shown of the answer while it is generated. Number answers are written units
        first (trnlab.data.tasks.written_answer), so their usual form exists only once they are
        finished; the other tasks' text grows token by token."""
        if task_of(prompt) in NUMBER_TASKS and not finished:
            return ""
        return self.text_of(prompt, output_ids)

    def health(self) -> dict:
        """Whether the service can answer now: its engine thread runs and its last step succeeded."""
        engine = self.engine
        problems = []
        if self._worker is None or not self._worker.is_alive():
            problems.append("the engine thread is not running")
        if self.last_step_error is not None:
            problems.append(f"the last engine step failed: {self.last_step_error}")
        health = {"status": "error" if problems else "ok", "model": self.model_name, "device": self.device,
                  "running": len(engine.running), "waiting": len(engine.waiting)}
        if problems:
            health["problems"] = problems
        warnings = getattr(self.backend, "warnings", None)
        if warnings:
            health["warnings"] = list(warnings)
        return health

    # -- the engine thread -----------------------------------------------------------------------
    def start(self) -> "Service":
        if self._worker is None:
            self._stop.clear()
            self._worker = threading.Thread(target=self._loop, name="trnlab-engine", daemon=True)
            self._worker.start()
        return self

    def stop(self) -> None:
        if self._worker is not None:
            self._stop.set()
            self._inbox.put(None)
            self._worker.join()
            self._worker = None

    def submit(self, prompt_ids: list[int], params: SamplingParams) -> tuple[Request, queue.Queue]:
        """Queue a request; its TokenEvents arrive on the returned queue (the last has a finish_reason)."""
        request = Request(list(prompt_ids), params)
        events: queue.Queue = queue.Queue()
        self._inbox.put(("submit", request, events))
        self.start()
        return request, events

    def cancel(self, request: Request) -> None:
        self._inbox.put(("cancel", request, None))

    def _loop(self) -> None:
        while not self._stop.is_set():
            engine = self.engine
            try:                      # block while there is nothing to do; otherwise only drain the inbox
                message = self._inbox.get(timeout=None if engine.idle else 0)
            except queue.Empty:
                message = False
            while message is not False:
                if message is None:
                    return
                kind, request, events = message
                if kind == "submit":
                    request.arrival_ns = engine.clock_ns        # arrives "now" on the simulated clock
                    try:
                        engine.submit(request)
                        self._listeners[request] = events
                    except ValueError as error:
                        events.put(error)
                elif engine.cancel(request):
                    self._listeners.pop(request, None)
                try:
                    message = self._inbox.get_nowait()
                except queue.Empty:
                    message = False
            if engine.idle:
                continue
            try:
                produced = engine.step()
            except Exception as error:   # a failing step must not strand anyone: every listener hears it
                self.last_step_error = f"{type(error).__name__}: {error}"
                for events in self._listeners.values():
                    events.put(error)
                self._listeners.clear()
                self.engine = Engine(self.backend, self.tokenizer.eos_id, engine.max_batch)   # a clean start
                continue
            self.last_step_error = None
            for event in produced:
                listener = self._listeners.get(event.request)
                if listener is not None:
                    listener.put(event.error if event.error is not None else event)
                    if event.finish_reason is not None:
                        del self._listeners[event.request]

    # -- one prompt, waiting for the answer ------------------------------------------------------
    def ask(self, prompt: str, params: SamplingParams = SamplingParams()) -> Answer:
        start = time.perf_counter()
        request, events = self.submit(self.encode(prompt), params)
        while True:
            event = events.get()
            if isinstance(event, Exception):
                raise event
            if event.finish_reason is not None:
                break
        return Answer(prompt, self.text_of(prompt, request.output_ids), event.finish_reason, request, self.device,
                      time.perf_counter() - start)


def ask(prompt: str, device: str = "trn2", params: SamplingParams = SamplingParams(),
        checkpoint: Path = DEFAULT_CHECKPOINT) -> Answer:
    """Answer one prompt on `device` ("cpu", "trn1", "trn2", "trn3") and stop the service again."""
    service = Service(device, checkpoint, max_batch=1)
    try:
        return service.ask(prompt, params)
    finally:
        service.stop()


def collect(events: "queue.Queue[TokenEvent | Exception]") -> list[TokenEvent]:
    """Every event of one request, until its last (raises what the engine reported)."""
    out = []
    while True:
        event = events.get()
        if isinstance(event, Exception):
            raise event
        out.append(event)
        if event.finish_reason is not None:
            return out
