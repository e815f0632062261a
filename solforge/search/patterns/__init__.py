"""The built-in patterns: what each matches, and what it checks to stay exact.

Each module defines its ``Pattern`` objects (``*_PATTERN``); ``match.py`` names them in its
table of import paths, in the order :func:`~solforge.search.match.find_matches` tries them:

- ``sdpa``: ``matmul(q, k^T)`` [``* scale``] [``+ triu(full(-big), 1)``] ``softmax(-1)``
  [cast] ``matmul(., v)`` → ``F.scaled_dot_product_attention(q, k, v, is_causal=...,
  scale=...)``; q, k may be cast to fp32 first (scores in fp32, as fused kernels keep
  them; with v cast too, the call takes the casts); q, k, v and the output share one
  dtype. The causal mask is recognised by its construction (``full`` of a value at or
  below -1e30, ``triu(1)``, square); any other additive mask is ``sdpa_bias``'s.
- ``sdpa`` (masked): the same with ``.masked_fill(M, -inf or at most -1e4)`` before the
  softmax and a dropout that is the identity as traced (``p == 0``, eval mode) before
  ``@ v`` → ``runtime.masked_sdpa``: SDPA with the boolean mask ``M`` leaves
  (``X == c`` → ``X != c``, ``~X`` → ``X``); where ``X`` is a module buffer (minGPT's
  ``bias[:, :, :T, :T] == 0``), SDPA's causal kernel when its values are
  ``tril(ones)``, checked at run time once per buffer version; rows with no key left get
  the reference's NaN (or mean of ``v`` for a finite fill).
- ``sdpa_bias``: the same chain with ``+ bias`` after the scale (either order), then
  optionally the boolean ``masked_fill`` → ``runtime.biased_sdpa``: SDPA with the bias as
  its float ``attn_mask`` (``-inf`` where the boolean mask masks), the bias's own nodes
  kept (BLOOM's ALiBi, Swin's relative-position table, additive padding masks). The bias
  has the call's dtype (or widens to it exactly), does not promote the scores, broadcasts
  to them without growing them, rank 2 or more; rows with no key get the reference's NaN
  (or mean of ``v`` for a finite fill).
- ``mha_no_weights``: an ``nn.MultiheadAttention`` call whose attention weights are
  unused (``out, _ = self.attn(q, k, v)``) → the same call with ``need_weights=False``
  (SDPA, no ``(L, S)`` weight matrix), its other arguments kept; with a mask, rows no
  key is left to get NaN, as with weights (``runtime.nan_where_no_key``).
- ``gqa``: ``repeat_kv`` (``x[:, :, None].expand(b, h, n, s, d).reshape(b, h * n, s, d)``,
  or with ``unsqueeze(2)``) of both keys and values feeding an SDPA call → the same call
  on the shared heads with ``enable_gqa=True``, its mask, scale and causal flag kept.
- ``fp8_quant_per_group`` / ``fp8_quant_per_tensor``: DeepSeek's ``act_quant`` and vLLM's
  dynamic per-tensor quantization to ``float8_e4m3fn`` with the clamp to +-448, → the
  library's quantizers (same divisions, same rounding).
- ``lowp_gemm``: ``mm``/``matmul``/``F.linear`` of two FP8, int8, bf16 or fp16 operands
  cast to fp32 (each
  optionally times a [1] or [rows, 1] scale) → the product on TF32 tensor cores, exact for
  such operands, with the scales after it (``runtime.exact_lowp_matmul``); on a GPU also
  on the operands' own tensor cores (``runtime.native_lowp_matmul``), a candidate of its
  own.
- ``add_rms_norm`` / ``rms_norm``: ``x.float()``, ``pow(2).mean(-1, keepdim)``, ``+ eps``,
  ``rsqrt``, ``*``; then either Llama's ``w * h.to(x.dtype)`` or Gemma's ``(h * (1 +
  w.float())).type_as(x)``; a residual ``a + b`` feeding it (same shape and dtype, no
  broadcast) fuses into ``add_rms_norm``.
- ``rope``: ``x * cos + cat(-x[..., D/2:], x[..., :D/2]) * sin`` on 4-D ``x`` with cos/sin
  broadcast over heads, all one dtype; two rotations sharing their tables (q and k) become
  one launch.
- ``swiglu`` / ``geglu``: ``silu(g) * u`` and ``gelu(g, approximate="tanh") * u``.
- ``layer_norm``: ``nn.LayerNorm`` / ``F.layer_norm`` over the last dim or several
  trailing dims (KernelBench's ``nn.LayerNorm((64, 256, 256))``), weight and bias of that
  shape in the input's dtype, or none → the library's layer_norm (one pass a row; long
  rows that fill the GPU read once by a cooperative launch; the rest, or too few rows to
  fill it, split over programs: Welford pieces, then merge and normalise).
- ``group_norm``: ``nn.GroupNorm`` / ``F.group_norm``, and ``nn.InstanceNorm1d/2d/3d``
  without running statistics / ``F.instance_norm`` with none (KernelBench's 35 and 34),
  parameters of the input's dtype, → the library's group_norm / instance_norm (a group or
  a plane is a row: read once by a cooperative launch when long rows fill the GPU); an
  fp32 result that reaches a convolution is left to PyTorch, as for batch norm.
- ``row_norm``: ``x / x.abs().mean(-1, keepdim=True)`` and ``x / x.norm(p=2, dim=-1,
  keepdim=True)`` (``torch.norm``, ``torch.linalg.vector_norm``; KernelBench's 38 and 39)
  → the library's div_by_row_norm (one read of each row; the statistic rounded to the
  input's dtype as PyTorch rounds it).
- ``dim_norm``: the same divisions over a dim with others after it, and
  ``x / sqrt(mean(x ** 2, dim, keepdim=True) + eps)`` (RMS over channels without a weight:
  KernelBench's 36) and ``F.normalize(x, p=2, dim)`` (the norm clamped to ``eps``) → the
  library's div_by_dim_norm (a dim of up to 128 read once as one register tile per column
  tile, a longer one walked twice; each rounding of eager's made in 16-bit dtypes); an
  fp32 result that reaches a convolution is left to PyTorch.
- ``batch_norm``: ``nn.BatchNorm1d/2d/3d`` (training or eval: the module's mode, momentum
  and buffers read when the candidate runs, its running buffers and
  ``num_batches_tracked`` updated in place), with the ReLU after it, or a residual add
  (``+``, ``+=``, ``torch.add``; the other operand of the same shape and dtype, or itself
  a batch norm read only there: ResNet's downsample branch) and the ReLU after that → the
  library's batch_norm_act (split statistics, then one pass for the whole expression);
  the convolutions stay the reference's calls. An fp32 result that reaches a convolution
  is left to PyTorch: cuDNN's TF32 rounding of that input turns the kernel's ulp of
  difference into 1e-4 (so in KernelBench's ResNet block only the last batch norms, the
  add and the ReLU are fused).
- ``softmax``: softmax or log_softmax over the last dim, with the cast after it
  (``softmax(s, dtype=f32).to(dt)``) → the library's softmax / log_softmax (online, long
  rows split over programs), the cast fused.
- ``softmax_topk``: ``topk(softmax(x, -1, dtype=float32), k)`` and the renormalisation and
  cast of its values (Mixtral's router) → the library's softmax_topk, one launch.
- ``argmax``: ``argmax(x, dim=-1)`` of a floating-point ``x`` → the library's argmax, which
  splits a few long rows over many programs (``torch.argmax``'s ties and NaNs kept);
  ``argmin`` likewise; over any other dim or with ``keepdim`` → ``argmax_dim`` /
  ``argmin_dim`` (contiguous tiles of the dims after it, the reduced dim walked, split
  over programs when the columns are few).
- ``sum_dim``: ``x.sum(dim)`` / ``x.mean(dim)`` over one dim other than the last (an MoE
  combine over its top-k, a token pooling) → the library's sum_dim.
- ``max_dim``: the values of ``torch.max(x, dim)`` / ``torch.min(x, dim)`` (``[0]`` or
  ``.values``, the indices unread) and ``torch.amax`` / ``torch.amin`` over one dim other
  than the last (KernelBench's 49 and 53) → the library's max_dim / min_dim, the sum's
  kernel: exact, NaN propagated, of equal zeros the first as ``torch.max(dim)``.
- ``cross_entropy``: ``F.cross_entropy`` / ``nn.CrossEntropyLoss`` of ``[N, C]`` logits
  and int64 class indices, reduction mean, sum or none, any ``ignore_index``, no class
  weights or label smoothing (an fp32 upcast of 16-bit logits just before it is read as
  16-bit) → the library's cross_entropy (one read of each row, a deterministic mean).
- ``bias_act``: GELU (erf or tanh) or SiLU of ``x + bias`` (a [N] parameter), of a biased
  ``nn.Linear`` (the GEMM runs without its bias, which the epilogue adds: one extra rounding
  of the GEMM output in 16-bit dtypes, exact in fp32), or alone.
- ``depthwise_conv`` (GPU only): an ``nn.Conv1d`` / ``nn.Conv2d`` call with ``groups ==
  in_channels`` (a channel multiplier allowed), zero padding, a contiguous fp32, bf16 or
  fp16 input → the library's depthwise_conv:
  ATen's CUDA sums in ATen's order (the bias or 0, then each in-bounds tap by a fused
  multiply-add), so fp32 and bf16 outputs are PyTorch's bit for bit and may feed a TF32
  convolution; a tile of outputs a program, the kernel's size unrolled.
- ``f32x3_gemm`` (a GPU-only ``variant``: a candidate of its own beside the others'
  rewrite): a large fp32 ``nn.Linear`` / ``F.linear`` / ``matmul`` / ``mm`` / ``bmm`` with
  the bias add and ReLU/GELU/SiLU after it → the library's 3xTF32 GEMM (fp32 accuracy on
  the tensor cores, epilogue fused).

Not covered: ``F.conv1d`` / ``F.conv2d`` calls, grouped convolutions that are not
depthwise, and depthwise ``nn.Conv3d``; ``F.batch_norm`` calls and subclasses of the batch-norm modules
(``SyncBatchNorm``); other activations after a batch norm; RMSNorm without a weight or
written with ``1 / sqrt``; LayerNorm, GroupNorm and InstanceNorm with parameters in another
dtype than the input's; InstanceNorm with running statistics; norms over a middle dim
(KernelBench's 36_RMSNorm_) or clamped (``F.normalize``);
argmax/argmin of the flattened tensor (``dim=None``) or of integers; max/min values and
indices both read, over several dims or over the last dim; cross-entropy with class
weights, label smoothing, probability targets or logits of other than 2 dims; interleaved (GPT-J)
or partial rotary embeddings, and vLLM's ``cos_sin_cache`` form; attention with a float
bias added before the scale, on a view of the scores, in several adds, or rounded for the
call (an fp32 bias beside bf16 q, k, v), a mask applied before the scale or the bias,
``torch.where`` masks, dropout with ``p > 0`` while training, and routing to FlexAttention;
``nn.MultiheadAttention`` with ``is_causal=True`` or whose weights are read; exact-erf
GeGLU; FP8 per-block (weight) quantization, FP8 dequantization, int8 quantization.
"""
