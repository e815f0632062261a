"""Other benchmarks' formats, read into solforge problems and written back.

``definition.py`` reads SOL-ExecBench's and FlashInfer-Bench's definition and workload
schemas; ``runtime.py`` is what a converted problem file calls when it runs (inputs,
destination-passing outputs); ``solexec.py`` converts definition folders and datasets to
problem files; ``solution_json.py`` turns a ``solution.json`` into a solforge solution and a
solforge solution back into one; ``rows.py`` reads CUDA-Agent-Ops rows and KernelBench level
folders into problem sets. Traces out live with the record (``records/flashinfer.py``).
"""
