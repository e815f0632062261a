"""CLIP ViT-L/14's patch-embedding weight gradient (a 14x14 stride-14 convolution from 3 to 1024
channels, no bias, on 224x224 images): the image-to-patch GEMM's dW, summed over 256 patches of
every image of a large contrastive batch; bf16, fp32 accumulation."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "patch_embed_wgrad_clip",
    "category": "L1",
    "direction": "backward",
    "family": "CLIP",
    "models": ["CLIP ViT-L/14", "CLIP ViT-B/16"],
    "shapes_from": "openai/clip-vit-large-patch14 config.json (vision_config): hidden_size "
                   "1024, patch_size 14, image_size 224, num_channels 3; clip-vit-base-patch16: "
                   "768, 16; batch = images per GPU",
    "precision": "bf16_grad",
    "description": "Weight gradient of y = conv2d(pixels, W, stride=patch) (CLIPVisionEmbeddings"
                   ".patch_embedding, bias=False): inputs grad_out (N, D, 224/p, 224/p) and "
                   "pixels (N, 3, 224, 224); returns dW (D, 3, p, p) = sum over images and "
                   "patches of grad_out times the patch.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 2, "dim": 16, "patch": 4, "image": 16},
         "cpu": True},
        {"name": "train_b256_l14", "params": {"batch": 256, "dim": 1024, "patch": 14,
                                              "image": 224}},
        {"name": "train_b512_b16", "params": {"batch": 512, "dim": 768, "patch": 16,
                                              "image": 224}},
        {"name": "train_b1024_l14", "params": {"batch": 1024, "dim": 1024, "patch": 14,
                                               "image": 224}, "visible": False},
        {"name": "cpu_odd", "params": {"batch": 3, "dim": 24, "patch": 3, "image": 15},
         "cpu": True, "visible": False},
    ],
    "flops": lambda p: 2 * p["batch"] * p["dim"] * 3 * p["image"] ** 2,
    "bytes": lambda p: 2 * p["batch"] * (p["dim"] * (p["image"] // p["patch"]) ** 2
                                         + 3 * p["image"] ** 2) + 2 * p["dim"] * 3 * p["patch"] ** 2,
}


class Model(nn.Module):
    def __init__(self, patch: int = 14):
        super().__init__()
        self.patch = patch

    def forward(self, grad_out, pixels):
        shape = (grad_out.shape[1], pixels.shape[1], self.patch, self.patch)
        return torch.nn.grad.conv2d_weight(pixels, shape, grad_out, stride=self.patch)


def autograd_forward(model, grad_out, pixels):
    """The forward this problem differentiates (tests/problems/test_backward.py)."""
    w = torch.zeros(grad_out.shape[1], pixels.shape[1], model.patch, model.patch,
                    dtype=pixels.dtype)
    return (lambda w: nn.functional.conv2d(pixels.double(), w, stride=model.patch)), [w], \
        [grad_out]


def get_inputs(batch: int = 256, dim: int = 1024, patch: int = 14, image: int = 224,
               dtype=torch.bfloat16):
    # pixels normalised with CLIP's mean and std: roughly standard normal per channel
    pixels = gen.randn(batch, 3, image, image, dtype=dtype)
    n = image // patch
    return [gen.randn(batch, dim, n, n, dtype=dtype), pixels]


def get_init_inputs(patch: int = 14):
    return [patch]
