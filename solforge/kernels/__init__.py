"""Kernel helpers for solutions: the NVRTC fast path for CUDA C++ (``cuda``)."""
