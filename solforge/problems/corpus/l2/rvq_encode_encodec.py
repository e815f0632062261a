"""EnCodec's residual vector quantizer in encoding (HF EncodecResidualVectorQuantizer.encode
then decode): each of n_q codebooks of 1024 entries picks, for each frame, the entry nearest
(squared L2) to the current residual; the entry is subtracted from the residual and added to
the quantized output; fp32.

The frames are what an encoder's output is to a trained quantizer: near a sum of one code
per codebook (``get_inputs`` rebuilds the codebooks from the same fixed generator the model
uses, picks codes and adds noise from the active distribution). So every stage's nearest
code is well ahead of the next one, and two correct kernels that round the distances
differently pick the same codes: with plain random frames, near-ties among 1024 codes flip
under any change of summation order and the flip carries through the later stages."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "rvq_encode_encodec",
    "category": "L2",
    "models": ["EnCodec 24 kHz", "EnCodec 32 kHz (MusicGen)"],
    "family": "EnCodec",
    "shapes_from": "config.json of facebook/encodec_24khz (codebook_size 1024, codebook_dim 128, "
                   "75 frames/s, target_bandwidths 12 kbps = 16 codebooks, 6 kbps = 8) and "
                   "facebook/encodec_32khz (4 codebooks of 2048, 50 frames/s)",
    "precision": "fp32",
    "description": "x (b, D, T): r = x; for each codebook C_q (K, D): i = argmin_k |r - C_q[k]|^2, "
                   "q = C_q[i], r -= q, out += q; returns out (b, D, T).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "dim": 8, "frames": 10, "codes": 16,
                                         "n_q": 3}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "dim": 4, "frames": 7, "codes": 9,
                                       "n_q": 2}, "cpu": True, "visible": False},
        {"name": "24khz_6kbps_10s_b8", "params": {"batch": 8, "dim": 128, "frames": 750,
                                                  "codes": 1024, "n_q": 8}},
        {"name": "24khz_12kbps_10s_b2", "params": {"batch": 2, "dim": 128, "frames": 750,
                                                   "codes": 1024, "n_q": 16}},
        {"name": "32khz_musicgen_30s_b4", "params": {"batch": 4, "dim": 128, "frames": 1500,
                                                     "codes": 2048, "n_q": 4},
         "visible": False},
    ],
    "flops": lambda p: 2 * p["n_q"] * p["batch"] * p["frames"] * p["codes"] * p["dim"],
    "bytes": lambda p: 4 * (2 * p["batch"] * p["dim"] * p["frames"]
                            + p["n_q"] * p["codes"] * p["dim"]),
}


class Model(nn.Module):
    def __init__(self, dim: int = 128, codes: int = 1024, n_q: int = 8):
        super().__init__()
        # later codebooks quantize smaller residuals, as trained ones do
        self.codebooks = nn.Parameter(codebooks(dim, codes, n_q))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, d, t = x.shape
        r = x.transpose(1, 2).reshape(-1, d)
        out = torch.zeros_like(r)
        for cb in self.codebooks:
            dist = r.pow(2).sum(1, keepdim=True) - 2 * r @ cb.t() + cb.pow(2).sum(1)[None]
            q = cb[dist.argmin(dim=1)]
            r = r - q
            out = out + q
        return out.view(b, t, d).transpose(1, 2)


def codebooks(dim: int, codes: int, n_q: int) -> torch.Tensor:
    """The codebooks, from a generator of their own (the model's and the inputs' agree);
    later codebooks quantize smaller residuals, as trained ones do."""
    g = torch.Generator().manual_seed(2024)
    # residual norms fall geometrically: each stage's nearest code stays far ahead
    scale = 0.35 ** torch.arange(n_q, dtype=torch.float32, device="cpu")
    # Tensor.normal_: the evaluator's distributions reshape torch.randn, not this draw; on
    # the CPU, where the generator is, whatever the default device (then moved to it)
    cb = torch.empty(n_q, codes, dim, device="cpu").normal_(generator=g)
    return (cb * scale[:, None, None]).to(torch.get_default_device())


def get_inputs(batch: int = 8, dim: int = 128, frames: int = 750, codes: int = 1024,
               n_q: int = 8):
    cb = codebooks(dim, codes, n_q)
    ids = gen.indices(codes, n_q, batch * frames)
    x = sum(cb[q][ids[q]] for q in range(n_q))              # (b*t, d): one code each
    x = x + 1e-3 * 0.35 ** n_q * gen.randn(batch * frames, dim)  # the encoder's miss
    return [x.view(batch, frames, dim).transpose(1, 2).contiguous()]


def get_init_inputs(dim: int = 128, codes: int = 1024, n_q: int = 8):
    return [dim, codes, n_q]
