"""Whisper's log-Mel spectrogram (openai/whisper audio.log_mel_spectrogram, HF
WhisperFeatureExtractor with torch): STFT with a 400-sample Hann window and hop 160 over 16 kHz
audio, power of all but the last frame, a Mel filterbank (128 bands for large-v3, 80 before),
log10 clamped at 1e-10, floored at 8 below each clip's maximum, then (x + 4) / 4; fp32."""

import math

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "log_mel_whisper",
    "category": "L2",
    "models": ["Whisper large-v3", "Whisper base"],
    "family": "Whisper",
    "shapes_from": "openai/whisper audio.py constants (SAMPLE_RATE 16000, N_FFT 400, HOP_LENGTH "
                   "160, 30 s chunks = 480000 samples -> 3000 frames) and preprocessor_config.json "
                   "of openai/whisper-large-v3 (feature_size 128) and whisper-base (80)",
    "precision": "fp32",
    "description": "wave (b, samples) -> |stft|^2 (b, 201, frames) without its last frame -> "
                   "filters (mels, 201) @ -> log10(clamp(1e-10)) -> max(x, max_b(x) - 8) -> "
                   "(x + 4) / 4.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "samples": 3200, "mels": 16}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "samples": 2000, "mels": 8}, "cpu": True,
         "visible": False},
        {"name": "large_v3_30s_b16", "params": {"batch": 16, "samples": 480000, "mels": 128}},
        {"name": "base_30s_b64", "params": {"batch": 64, "samples": 480000, "mels": 80}},
        {"name": "large_v3_30s_b1", "params": {"batch": 1, "samples": 480000, "mels": 128},
         "visible": False},
    ],
    # an FFT of 400 points per frame (~5 N log2 N) and the filterbank GEMM
    "flops": lambda p: p["batch"] * (p["samples"] // 160) * (5 * 400 * math.log2(400)
                                                             + 2 * 201 * p["mels"]),
    "bytes": lambda p: 4 * p["batch"] * (p["samples"] + p["mels"] * (p["samples"] // 160)),
}


def mel_filters(n_mels: int, n_fft: int = 400, sr: int = 16000) -> torch.Tensor:
    """Slaney-style triangular filters (librosa.filters.mel's shape), (n_mels, n_fft // 2 + 1)."""
    def hz_to_mel(f):
        return 2595.0 * math.log10(1.0 + f / 700.0)
    mels = torch.linspace(hz_to_mel(0.0), hz_to_mel(sr / 2), n_mels + 2)
    hz = 700.0 * (10 ** (mels / 2595.0) - 1.0)
    fft = torch.linspace(0, sr / 2, n_fft // 2 + 1)
    lower = (fft[None, :] - hz[:-2, None]) / (hz[1:-1] - hz[:-2])[:, None]
    upper = (hz[2:, None] - fft[None, :]) / (hz[2:] - hz[1:-1])[:, None]
    tri = torch.clamp(torch.minimum(lower, upper), min=0.0)
    return tri * (2.0 / (hz[2:] - hz[:-2]))[:, None]


class Model(nn.Module):
    def __init__(self, mels: int = 128):
        super().__init__()
        self.register_buffer("window", torch.hann_window(400))
        self.register_buffer("filters", mel_filters(mels))

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        stft = torch.stft(wave, 400, 160, window=self.window, return_complex=True)
        power = stft[..., :-1].abs() ** 2
        log_spec = torch.clamp(self.filters @ power, min=1e-10).log10()
        log_spec = torch.maximum(log_spec, log_spec.amax(dim=(1, 2), keepdim=True) - 8.0)
        return (log_spec + 4.0) / 4.0


def get_inputs(batch: int = 16, samples: int = 480000):
    # speech-level audio in [-1, 1] floats: std ~0.1
    return [gen.randn(batch, samples, scale=0.1)]


def get_init_inputs(mels: int = 128):
    return [mels]
