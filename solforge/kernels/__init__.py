"""Kernel helpers for solutions: the NVRTC fast path for CUDA C++ (``cuda``) and the
autotuned Triton kernel library (``triton``)."""
