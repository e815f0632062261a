"""The built-in candidate families: the generators ``candidates.py`` names by import path
(``solforge.search.families.<module>:<family>_family``), one module a family, beside the
piece they share that turns a family's choice into a candidate (``render.py``).

=================  ================================================================  ==========
family             candidates                                                         applies to
=================  ================================================================  ==========
``reference``      the reference unchanged (the floor: the answer when nothing wins)  every problem
``compile``        ``torch.compile`` default; ``max-autotune-no-cudagraphs``          every problem;
                   (GPU)                                                              max-autotune on a GPU
``cuda_graphs``    one CUDA graph per input signature, of the eager and of the        GPU only
                   compiled forward (``runtime.CudaGraphed``)
``tf32``           fp32 matmul/conv on TF32 tensor cores; with and without compile   tf32-class problems
                                                                                      with a matmul or conv
``conv``           cuDNN autotuning (GPU), with and without compile; channels-last   problems with a
                   (NHWC or NDHWC) weights and inputs, with and without compile       convolution
``inductor``       TorchInductor settings beyond the modes (``inductor.py``):         every problem;
                   coordinate-descent tuning, freezing, max-autotune's templates      see inductor.py
``library``        the traced graph with library kernels substituted (``patterns``):  problems whose graph
                   all matches together; on a GPU also each kind alone when there      has a pattern
                   are several; the rewrite under compile where work of the
                   reference's is left between the calls (library calls left out of
                   the compiled graphs; GPU only where they are Triton's); CUDA graphs
                   of the rewrite (GPU); FP8/int8/16-bit GEMMs also on their own tensor
                   cores (GPU, ``library:lowp_tensor_cores``)
``rowfuse``        the whole forward as one generated Triton kernel, one pass over    GPU only; row
                   the rows (``rowfuse/``): row reductions in registers, column       programs with a
                   reductions summed per program in fp32, then over the programs      reduction
=================  ================================================================  ==========

Where each lives: ``generic.py`` (``reference``, ``compile``, ``cuda_graphs``, ``tf32``:
the reference's forward wrapped whole), ``conv.py``, ``inductor.py``, ``rowfuse.py``
(its classifier and code generator: ``solforge.search.rowfuse``) and ``library.py``,
whose candidates are each made by ``rewrite.py`` and include the rewrite compiled around
its calls (``compiled_around.py``) and the variant patterns' (``variants.py``, 3xTF32).

Which families apply is decided by what the reference contains (``reference_facts.py``:
fp32 matmuls, convolutions, host reads). On a CPU the GPU-only candidates are not
generated (same code path, fewer candidates); cuDNN autotuning is GPU-only too, since it
changes nothing on a CPU.

The evaluator's primary figure is device kernel time, which launch gaps do not count: CUDA
graphs show their gain in per-call latency, and in kernel time only where a replayed
graph runs its kernels faster; their copies in and out count against them.

This face imports nothing: the registry names each family by its module's path, so a
family whose dependencies are missing costs only its own name. Not covered: Triton
launches traced into a compiled graph (a compiled rewrite runs each library call as a
graph break, ``compiled_around.py``); explicit Triton configs beyond the library's own
``@triton.autotune`` lists; CUDA graphs of a forward that cannot be captured for a reason
its source does not show (its candidate fails and the family stops; a forward that reads
tensor values on the host gets no graph candidate).
"""
