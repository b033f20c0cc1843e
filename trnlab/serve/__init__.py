"""trnlab.serve — the tiny GPT answering requests: KV cache, buckets, continuous batching, an HTTP API.

    kv_cache.py    the KV cache (slots × layers × positions × channels) and the shape buckets
    sampling.py    greedy, temperature, top-k, top-p, seeded per request
    backend.py     the Backend seam (prefill / decode → logits + simulated ns) and the PyTorch backend
    steps.py       the backend on the simulated NeuronCore: a compiled prefill program per length bucket
                   and a decode program per (batch, cache) bucket (trnlab.compiler), replayed
    engine.py      continuous batching: requests join and leave the decode batch; TTFT / TPOT / E2E
    latency.py     batch size against latency on Trn1/Trn2/Trn3; prefill and decode on the roofline
    service.py     the engine in a background thread, prompts in the course's form
    http.py        `python -m trnlab serve`: OpenAI-compatible /v1/completions, /v1/chat/completions

    from trnlab.serve import Service
    Service("trn2").ask("407+38")          # Answer: text "445", simulated latency breakdown
"""
from trnlab.serve.backend import Backend, CpuBackend, StepResult, make_backend
from trnlab.serve.steps import CompiledBackend
from trnlab.serve.engine import Engine, Request, generate
from trnlab.serve.kv_cache import KVCache, bucket_for, buckets, kv_cache_bytes
from trnlab.serve.sampling import SamplingParams
from trnlab.serve.service import Answer, Service, ask

__all__ = ["Answer", "Backend", "CompiledBackend", "CpuBackend", "Engine", "KVCache", "Request", "SamplingParams", "Service",
           "StepResult", "ask", "bucket_for", "buckets", "generate", "kv_cache_bytes", "make_backend"]
