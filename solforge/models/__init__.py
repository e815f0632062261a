"""From a model and back: extract its problems, apply kept solutions to it, validate it.

- ``extract.py``: a live model's repeated modules as problem files, ranked by their share of
  the model's time (``source.py`` builds the model, ``capture.py`` hooks it, ``rebuild.py``
  writes how each module is built again, ``problem_file.py`` writes each problem's text).
- ``apply.py``: kept solutions of a run or an export swapped into a live model, module by
  module, only for the shapes and dtypes each was verified on; undoable.
- ``validate.py``: the original against the patched model: drift, perplexity, greedy
  agreement, latency, and the drift of each patched module alone; ``timing.py``: the steps
  replayed from CUDA graphs and each patched module's host and device cost per call.

Not covered: patching training steps (``extract --backward`` writes backward problems, but
``apply`` swaps forwards only) and models spread over several devices.
"""

# ``apply`` swaps a kept solution in only where its record measured it this many times as
# fast as the original module: below it the gain is within the timing's noise (1-2% between
# runs of the same solution) and the dispatch's host time is a sure loss. Here, not in
# ``apply.py``, so the CLI can name it without importing torch.
MIN_SPEEDUP = 1.05
