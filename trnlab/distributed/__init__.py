"""Many cores, chips and servers: topologies, collectives, data / tensor / pipeline parallelism,
scaling estimates, and a real multi-process training run on torch.distributed (gloo).

- `topology`: the ranks of a chip, a server or an UltraServer and their links (NeuronLink, Trn3's PCIe
  switch levels, EFA).
- `collectives`: all-reduce, all-gather, reduce-scatter, send/recv — executed on NumPy arrays per rank
  (ring, tree, recursive doubling-halving, mesh) and costed over a topology's links.
- `cluster`: the ranks as simulated NeuronCores running programs whose collectives are instructions on
  each core's CC engines (`nki.collectives` in a kernel); `overlap`: a gradient all-reduce overlapping
  the next layer's backward on that timeline; `validation`: the cost model against the textbook and
  AWS's nccom-test runs (and the calibration fitted to them).
- `data_parallel`, `tensor_parallel`, `pipeline`: the three ways to split training, on the tiny GPT.
- `scaling`: step time, throughput and communication share per layout; "would it fit on one chip?".
- `train`: ``torchrun --nproc-per-node=2 -m trnlab.distributed.train ...`` (or without torchrun: 1 process).
"""
