"""Where a model comes from: a ``transformers`` model type or config, a saved model folder, a
torchvision model name, or ``module:callable``; built offline with the shapes asked.

:func:`build_model` turns the MODEL argument of ``solforge extract`` / ``validate`` into a
:class:`BuiltModel`: the live ``nn.Module`` in eval mode on the device and dtype asked, and
:meth:`BuiltModel.inputs` for one step (``prefill``: ``batch`` x ``seq`` tokens; ``decode``:
one token per sequence after a prefill of ``seq``, the cache filled by that prefill).

- ``llama``, ``qwen2``, ``mixtral``, ... (any ``transformers`` model type): the type's default
  config with ``overrides`` (``hidden_size=64``, ``num_hidden_layers=2``), random weights,
  never a download. A causal LM is built with ``AutoModelForCausalLM`` (logits come out),
  other types with ``AutoModel``.
- a ``config.json`` file: that config (its ``model_type`` says the class), random weights.
- a folder holding ``config.json`` and weights (``save_pretrained``): loaded with its weights,
  local files only: the one way to validate perplexity on a trained model.
- a torchvision name (``resnet50``): ``torchvision.models.get_model`` with random weights.
- ``pkg.mod:fn``: ``fn(batch=, seq=, dtype=, device=)`` (each keyword only if its signature
  names it) returns ``(module, example_inputs)``, inputs a tuple of positional arguments or
  a dict of keyword arguments, used as given (one step; the largest ``--batch`` and
  ``--seq`` asked are what ``fn`` receives).

Not covered: models that need a download to build (remote code, tokenizer-only configs), and
decode steps of models without a ``transformers`` KV cache (``--decode`` says so).
"""

from __future__ import annotations

import importlib
import inspect
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
          "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
MODES = ("prefill", "decode")


class ModelSpecError(ValueError):
    """A MODEL argument that cannot be built; the message says what to fix."""


def parse_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ModelSpecError(f"--dtype {name!r}: use one of {', '.join(DTYPES)}") from None


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["hidden_size=64", "rope_scaling=null"]`` -> values read as JSON, else strings."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ModelSpecError(f"--set {item!r}: write KEY=VALUE, e.g. --set hidden_size=64")
        try:
            out[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            out[key.strip()] = raw
    return out


@dataclass
class BuiltModel:
    """A live model and how to call it for one step."""

    model: nn.Module
    name: str                       # what the user typed, for records
    kind: str                       # transformers, transformers-pretrained, torchvision, callable
    overrides: dict[str, Any] = field(default_factory=dict)
    example: Any = None             # a callable's own example inputs
    causal_lm: bool = False

    @property
    def device(self) -> torch.device:
        p = next(self.model.parameters(), None)
        return p.device if p is not None else torch.device("cpu")

    @property
    def vocab_size(self) -> int | None:
        cfg = getattr(self.model, "config", None)
        return getattr(getattr(cfg, "get_text_config", lambda: cfg)(), "vocab_size", None)

    def inputs(self, mode: str, batch: int, seq: int, seed: int = 0) -> dict[str, Any]:
        """Keyword arguments of ``model(**inputs)`` for one ``mode`` step (a decode step's
        cache comes from running the prefill here, not captured)."""
        if mode not in MODES:
            raise ModelSpecError(f"mode {mode!r}: use prefill or decode")
        if self.kind == "callable" or self.kind == "torchvision":
            if mode == "decode":
                raise ModelSpecError(f"{self.name}: --decode needs a transformers causal LM "
                                     "(a KV cache); this model has only one step: --prefill")
            ex = self.example
            return dict(ex) if isinstance(ex, dict) else {"__args__": tuple(ex)}
        g = torch.Generator().manual_seed(seed)
        if mode == "decode" and not self.causal_lm:
            raise ModelSpecError(f"{self.name}: --decode needs a causal LM with a KV cache; "
                                 f"{type(self.model).__name__} is not one: use --prefill")
        base = hf_inputs(self.model, batch, seq, g, self.device)
        if mode == "prefill":
            return base
        with torch.no_grad():
            out = self.model(**base, use_cache=True)
        cache = getattr(out, "past_key_values", None)
        if cache is None:
            cache = getattr(out, "cache", None)
        vocab = self.vocab_size or 2
        step = torch.randint(0, vocab, (batch, 1), generator=g).to(self.device)
        params = inspect.signature(self.model.forward).parameters
        key = "cache" if "cache" in params else "past_key_values"
        return {"input_ids": step, key: cache, "use_cache": True}

    def call(self, inputs: dict[str, Any]) -> Any:
        """Run the model on :meth:`inputs`' result."""
        if "__args__" in inputs:
            return self.model(*inputs["__args__"])
        return self.model(**inputs)


def hf_inputs(model: nn.Module, batch: int, seq: int, g: torch.Generator,
              device: torch.device) -> dict[str, Any]:
    """Random inputs of the kind the model's main input names (token ids, pixels, audio
    features), sized from its config."""
    cfg = model.config
    name = getattr(model, "main_input_name", "input_ids")
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    out: dict[str, Any] = {}
    dtype = next(model.parameters()).dtype

    def ids() -> torch.Tensor:
        return torch.randint(0, int(getattr(text, "vocab_size", 2)), (batch, seq), generator=g)

    def pixels(c: Any) -> torch.Tensor:
        size = getattr(c, "image_size", 224)
        size = size if isinstance(size, int) else size[0]
        return torch.randn(batch, getattr(c, "num_channels", 3), size, size, generator=g)

    if name == "input_ids":
        out["input_ids"] = ids()
        if hasattr(cfg, "vision_config"):  # CLIP-style: text and image towers
            out["pixel_values"] = pixels(cfg.vision_config)
        if getattr(cfg, "is_encoder_decoder", False):  # T5, BART: the decoder's tokens too
            out["decoder_input_ids"] = ids()
    elif name == "pixel_values":
        out["pixel_values"] = pixels(getattr(cfg, "vision_config", cfg))
    elif name == "input_features":  # Whisper: mel frames for the encoder, tokens decoded
        frames = 2 * int(getattr(cfg, "max_source_positions", 1500))
        out["input_features"] = torch.randn(batch, cfg.num_mel_bins, frames, generator=g)
        out["decoder_input_ids"] = ids()
    else:
        raise ModelSpecError(f"{type(model).__name__}: main input {name!r} is not one "
                             "solforge builds (input_ids, pixel_values, input_features); "
                             "wrap the model in a module:callable that returns its inputs")
    return {k: (v.to(device, dtype) if v.is_floating_point() else v.to(device))
            for k, v in out.items()}


def build_model(spec: str, overrides: dict[str, Any] | None = None,
                dtype: torch.dtype = torch.float32, device: str = "cpu", batch: int = 1,
                seq: int = 16, seed: int = 0) -> BuiltModel:
    """The model that ``spec`` names (see the module docstring), in eval mode."""
    overrides = dict(overrides or {})
    torch.manual_seed(seed)
    if ":" in spec and not Path(spec).exists():
        built = _from_callable(spec, batch=batch, seq=seq, dtype=dtype, device=device)
    elif Path(spec).is_dir():
        built = _from_pretrained(Path(spec), overrides)
    else:
        built = _from_config(spec, overrides, dtype, device)
    built.model.to(device=device, dtype=dtype).eval()
    return built


def _transformers():
    try:
        import transformers
    except ImportError:
        raise ModelSpecError("transformers models need the `models` extra: "
                             "pip install 'solforge[models]' (or pip install transformers)"
                             ) from None
    return transformers


def _is_causal_lm(cfg: Any) -> bool:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return cfg.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and not getattr(
        cfg, "is_encoder_decoder", False)


def _from_config(spec: str, overrides: dict[str, Any], dtype: torch.dtype = torch.float32,
                 device: str = "cpu") -> BuiltModel:
    path = Path(spec)
    if path.suffix == ".json":
        if not path.is_file():
            raise ModelSpecError(f"{spec}: no such config file")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ModelSpecError(f"{spec}: not JSON: {e}") from None
        model_type = data.pop("model_type", None)
        if not model_type:
            raise ModelSpecError(f"{spec}: a config needs 'model_type' (llama, qwen2, ...)")
        overrides = {**data, **overrides}
    else:
        model_type = spec
    tf = _transformers()
    try:
        cfg = tf.AutoConfig.for_model(model_type, **overrides)
    except ValueError as e:
        if model_type in tf.CONFIG_MAPPING:
            # a known type whose config rejected an override's value
            raise ModelSpecError(f"{spec}: its config rejected {overrides}: {e}") from None
        tv = _torchvision_model(spec)
        if tv is not None:
            return tv
        raise ModelSpecError(
            f"{spec!r} is not a transformers model type, a config .json, a saved model "
            "folder, a torchvision model or module:callable; types include llama, qwen2, "
            "mixtral, gemma2, mistral, phi3, gpt2, bert, vit, whisper") from None
    except Exception as e:  # a config attribute that cannot be set (a derived property)
        why = f"{type(e).__name__}: {e}"
        raise ModelSpecError(f"{spec}: its config refused the --set values {overrides}: "
                             f"{why}; drop or rename the key it names") from None
    overrides = {**overrides, **_token_ids_in_vocab(cfg, overrides)}
    causal = _is_causal_lm(cfg)
    auto = tf.AutoModelForCausalLM if causal else tf.AutoModel
    try:
        # built where it runs, in its dtype: a model of billions of values is not
        # initialised in fp32 on the host first
        with torch.device(device):
            model = auto.from_config(cfg, dtype=dtype)
    except Exception as e:  # a bad override: transformers says which
        raise ModelSpecError(f"{spec} with {overrides}: building the model failed: "
                             f"{type(e).__name__}: {e}") from None
    return BuiltModel(model=model, name=spec, kind="transformers", overrides=overrides,
                      causal_lm=causal)


TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")


def _token_ids_in_vocab(cfg: Any, overrides: dict[str, Any]) -> dict[str, Any]:
    """A ``--set vocab_size=`` below the type's default token ids (Phi-3's pad id 32000,
    Whisper's 50256) would fail to build ("Padding_idx must be within num_embeddings"):
    each such id the user did not set becomes the last id of the smaller vocabulary, set on
    ``cfg`` and returned, so the problems record it and ``validate`` rebuilds the same
    model."""
    vocab = overrides.get("vocab_size")
    if not isinstance(vocab, int) or vocab < 1:
        return {}
    moved: dict[str, Any] = {}
    for key in TOKEN_IDS:
        v = getattr(cfg, key, None)
        if key in overrides or v is None:
            continue
        ids = v if isinstance(v, list) else [v]
        if all(isinstance(i, int) for i in ids) and any(i >= vocab for i in ids):
            new = [min(i, vocab - 1) for i in ids]
            moved[key] = new if isinstance(v, list) else new[0]
            setattr(cfg, key, moved[key])
    return moved


def _from_pretrained(path: Path, overrides: dict[str, Any]) -> BuiltModel:
    if not (path / "config.json").is_file():
        raise ModelSpecError(f"{path}: a model folder needs config.json (save_pretrained)")
    tf = _transformers()
    cfg = tf.AutoConfig.from_pretrained(path, local_files_only=True, **overrides)
    causal = _is_causal_lm(cfg)
    auto = tf.AutoModelForCausalLM if causal else tf.AutoModel
    model = auto.from_pretrained(path, config=cfg, local_files_only=True)
    return BuiltModel(model=model, name=str(path), kind="transformers-pretrained",
                      overrides=overrides, causal_lm=causal)


def _torchvision_model(name: str) -> BuiltModel | None:
    try:
        import torchvision
    except ImportError:
        raise ModelSpecError(
            f"{name!r} is not a transformers model type, and torchvision (for its models) "
            "is not installed; torchvision wheels exist only for the torch they were built "
            "with: install the matching one, or pass module:callable") from None
    try:
        model = torchvision.models.get_model(name, weights=None)
    except ValueError:
        return None
    size = 224
    example = (torch.randn(1, 3, size, size),)
    return BuiltModel(model=model, name=name, kind="torchvision", example=example)


def _from_callable(spec: str, **kw: Any) -> BuiltModel:
    mod_name, _, attr = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError) as e:
        raise ModelSpecError(f"{spec}: cannot import {attr!r} from {mod_name!r}: {e}") from None
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin without a signature: called bare
        params = {}
    try:
        got = fn(**{k: v for k, v in kw.items() if k in params})
    except Exception as e:
        raise ModelSpecError(f"{spec}: calling it failed: {type(e).__name__}: {e}") from None
    if not (isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], nn.Module)):
        raise ModelSpecError(f"{spec}: must return (nn.Module, example_inputs); got "
                             f"{type(got).__name__}")
    model, example = got
    if not isinstance(example, (tuple, list, dict)):
        example = (example,)
    dev, dt = kw["device"], kw["dtype"]
    conv = (lambda t: t.to(dev, dt) if isinstance(t, torch.Tensor) and t.is_floating_point()
            else t.to(dev) if isinstance(t, torch.Tensor) else t)
    example = ({k: conv(v) for k, v in example.items()} if isinstance(example, dict)
               else tuple(conv(t) for t in example))
    return BuiltModel(model=model, name=spec, kind="callable", example=example)
