"""Row programs: a whole traced forward whose every value is a row, a per-row number, a
column vector or a scalar of one row space (``program.py``), recognised structurally
(``classify.py``, with ``operations.py`` reading each node) and written as one Triton
kernel and its launcher (``codegen.py``, ``kernel_ops.py`` for each operation).

The kernel: each program takes a contiguous block of rows and walks it in tiles of
``BLOCK_M`` whole rows in registers (``BLOCK_M`` and the warps autotuned per row length),
computes every node of the forward in the reference's order (fp32 math,
rounded to fp16/bf16 where eager rounds), writes the per-row outputs, and accumulates each
column reduction over its rows in fp32 registers; the launcher sums the programs' partial
rows. One read of every input, where TorchInductor reads the inputs of a row reduction
and a column reduction of the same tensors twice (a GPU survey of the corpus's norm
backwards: 0.43-0.65 of the memory roofline for Inductor's best).

Not covered: see each module; in short, anything beyond the row-program operations, and
rows longer than ``classify.MAX_N``.
"""
