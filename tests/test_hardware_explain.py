"""The timing listing says why each instruction started when it did: its queue, which dependency
(RAW / WAR / WAW on which buffer), a shared port, LoadStationary — checked on a handcrafted kernel."""
import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.hardware.explain import listing, why


# the kernel's storage as written (no address rotation), so its write-after-read and write-after-write
# hazards on x and r stay hazards to explain
@nki.jit(compile_config=nki.compiler.CompileConfig(address_rotation=nki.compiler.AddressRotation.DISABLE))
def kernel(a, w):
    out = nl.ndarray((128, 2048), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.ndarray((128, 2048), dtype=nl.float32, buffer=nl.sbuf, name="x")
    y = nl.ndarray((128, 2048), dtype=nl.float32, buffer=nl.sbuf, name="y")
    z = nl.ndarray((128, 2048), dtype=nl.float32, buffer=nl.sbuf, name="z")
    s = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf, name="s")
    q = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf, name="q")
    r = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf, name="r")
    p = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum, name="p")
    nisa.dma_copy(dst=x, src=a)                                           # 0
    nisa.memset(dst=z, value=1.0, engine=nisa.engine.vector)              # 1
    nisa.memset(dst=y, value=2.0, engine=nisa.engine.vector)              # 2
    nisa.activation(dst=y, data=x, op=nl.exp)                             # 3
    nisa.tensor_copy(dst=x, src=z, engine=nisa.engine.vector)             # 4
    nisa.memset(dst=q, value=3.0, engine=nisa.engine.gpsimd)              # 5
    nisa.dma_copy(dst=s, src=w)                                           # 6
    nisa.nc_matmul(dst=p, stationary=s, moving=q)                         # 7
    nisa.dma_copy(dst=r, src=a[:, 0:512])                                 # 8
    nisa.memset(dst=r, value=4.0, engine=nisa.engine.scalar)              # 9
    nisa.dma_copy(dst=out, src=y)                                         # 10
    return out


def test_the_listing_names_why_each_instruction_waited(monkeypatch):
    monkeypatch.setattr(nki, "SCHEDULE", "program")
    program = nki.trace(kernel, nki.ShapeDtype((128, 2048), "float32"), nki.ShapeDtype((128, 128), "float32"),
                        target="trn1")
    text = listing(program)
    lines = text.splitlines()[1:]
    assert len(lines) == len(program.instructions)
    from trnlab.hardware.core import NeuronCore
    from trnlab.hardware.replay import execute
    core = NeuronCore("trn1", mode="timing")
    execute(program, core, [None, None])
    waits = [why(program, core.timeline, k) for k in range(len(program.instructions))]
    assert [str(w) for w in waits] == lines
    causes = [(w.cause, w.on) for w in waits]
    assert causes[0] == ("start", -1)
    assert causes[2] == ("queue", 1)                           # the Vector engine was busy with #1
    assert causes[3] == ("RAW", 0) and waits[3].detail == "on x"        # reads what the DMA wrote
    assert causes[4] == ("WAR", 3) and waits[4].detail == "on x"        # overwrites what #3 reads
    assert causes[5] == ("port", 2) and "SBUF port shared with dve" in waits[5].detail   # NeuronCore-v2
    assert causes[7] == ("stationary", 6) and "of s" in waits[7].detail
    assert causes[9] == ("WAW", 8) and waits[9].detail == "on r"
    assert causes[10] == ("RAW", 3) and waits[10].detail == "on y"


def test_from_neuroncore_v3_on_vector_and_gpsimd_do_not_share_the_sbuf_port(monkeypatch):
    monkeypatch.setattr(nki, "SCHEDULE", "program")
    program = nki.trace(kernel, nki.ShapeDtype((128, 2048), "float32"), nki.ShapeDtype((128, 128), "float32"),
                        target="trn2")
    from trnlab.hardware.core import NeuronCore
    from trnlab.hardware.replay import execute
    core = NeuronCore("trn2", mode="timing")
    execute(program, core, [None, None])
    assert why(program, core.timeline, 5).cause == "start"
    assert core.timeline.explain(5, program) == str(why(program, core.timeline, 5))
