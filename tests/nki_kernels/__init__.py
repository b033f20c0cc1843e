"""Kernels written in the style of AWS's public NKI tutorials, with only the imports changed.

They prove that `trnlab.nki` accepts NKI programs as written: both API styles (functional `nl.load` /
`nl.matmul`, destination `nisa.dma_copy(dst=, src=)` / `nisa.nc_matmul(dst=, ...)`), SPMD grids,
access patterns, masks. tests/test_nki_kernels.py checks each against NumPy.
"""
