"""The whole chain in one call, for notebook 00: data → model → compile → simulated Trainium → deployed answer.

    report = whole_chain("407+38")        # a few seconds once the buckets are compiled (cached on disk)
    print(report)                         # one line per stage
    report.answers                        # {"pytorch": "445", "simulated": "445", "deployed": "445"}

Every stage calls the package that owns it: the corpus (`trnlab.data`), the checkpoint and PyTorch's
greedy answer (`trnlab.model`), the compiled prefill and decode programs of the prompt's buckets
(`trnlab.serve.steps`, built by `trnlab.compiler`), one answer replayed on the simulated NeuronCore
(`Service.ask`), and the same question sent to the OpenAI-compatible HTTP server on a loopback port
(`trnlab.serve.http`), as a user of the deployed model would send it.
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass, field

from trnlab.data import load_split
from trnlab.data.tasks import model_prompt, task_of
from pathlib import Path

from trnlab.model import ask, load_checkpoint
from trnlab.model.checkpoint import SIMULATED_CHECKPOINT
from trnlab.serve.kv_cache import bucket_for


@dataclass
class ChainReport:
    prompt: str
    target: str
    stages: list[tuple[str, str]] = field(default_factory=list)    # (stage, what happened there)
    answers: dict[str, str] = field(default_factory=dict)          # where the answer came from -> text
    latency: dict = field(default_factory=dict)                    # the deployed answer's simulated breakdown

    def __str__(self) -> str:
        return "\n".join(f"{stage:20s} {text}" for stage, text in self.stages)


def whole_chain(prompt: str = "407+38", target: str = "trn2", checkpoint: Path = SIMULATED_CHECKPOINT) -> ChainReport:
    """Run the prompt through every stage of the chain; see the module docstring. The model is the
    checkpoint trained on the simulated Trainium (notebook 07) unless `checkpoint` names another."""
    from trnlab.serve.http import BackgroundServer
    from trnlab.serve.service import Service

    report = ChainReport(prompt, target)
    test = load_split("test")
    example = test[0]
    report.stages.append(("1 data", f"{len(test)} test problems the model never trained on, e.g. "
                                    f"{example.prompt!r} -> {example.answer!r}"))

    model, tokenizer = load_checkpoint(checkpoint)
    ids = tokenizer.encode_prompt(model_prompt(task_of(prompt), prompt))
    report.answers["pytorch"] = ask(model, tokenizer, prompt)
    params = sum(p.numel() for p in model.parameters())
    report.stages.append(("2 model", f"tiny GPT, {params:,} parameters ({Path(checkpoint).name}); PyTorch greedy: {prompt!r} -> "
                                     f"{report.answers['pytorch']!r} ({len(ids)} prompt tokens)"))

    service = Service(target, max_batch=1, model=model, tokenizer=tokenizer)
    length = bucket_for(len(ids), service.backend.length_buckets)
    prefill = service.backend.step("prefill", (1, length))
    decode = service.backend.step("decode", (1, length))
    kernels = lambda step: sum(c.kind == "kernel" for c in step.program.calls)    # noqa: E731
    report.stages.append(("3 compile", f"prefill program for {length} positions: {kernels(prefill)} kernel calls; "
                                       f"decode program (batch 1, cache {length}): {kernels(decode)} kernel calls, "
                                       f"{sum(c.kernel == 'decode_attention' for c in decode.program.calls)} of "
                                       f"them decode_attention"))

    answer = service.ask(prompt)
    report.answers["simulated"] = answer.text
    lat = answer.request.latency()
    report.stages.append((f"4 simulated {target}", f"{answer.text!r}: TTFT {lat['ttft_ms'] * 1e3:.1f} µs, "
                                                   f"TPOT {lat['tpot_ms'] * 1e3:.1f} µs, "
                                                   f"{lat['output_tokens']} tokens"))

    with BackgroundServer(service) as url:
        body = json.dumps({"model": service.model_name, "prompt": prompt}).encode()
        request = urllib.request.Request(url + "/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            reply = json.loads(response.read())
    report.answers["deployed"] = reply["choices"][0]["text"]
    report.latency = reply["trnlab"]
    report.stages.append(("5 deployed", f"POST /v1/completions -> {report.answers['deployed']!r}, "
                                        f"end-to-end {reply['trnlab']['e2e_ms'] * 1e3:.1f} µs simulated"))
    return report
