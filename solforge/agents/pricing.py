"""What a model call costs: an ordered table of model-name patterns and their list prices.

Prices are US dollars per million tokens (input, output), as the vendors published them
for their public APIs in 2025. Vendors change prices and discounts (batch, cached input,
regional endpoints) that this table does not model, so the figures are an estimate of the
bill, not the bill. A model the table does not know has no price: its cost is reported as
unknown (never guessed) and a cost budget cannot be enforced for it; give the prices with
``--price-in`` / ``--price-out`` (or ``price_in`` / ``price_out`` in the config file).
Self-hosted servers (vLLM, SGLang, Ollama) cost what their hardware costs: give 0 and 0.

The first pattern that matches (``re.search`` on the lower-cased model name) wins, so more
specific names come first.
"""

from __future__ import annotations

import re

# (pattern, input $/Mtok, output $/Mtok)
PRICES: list[tuple[str, float, float]] = [
    # OpenAI (platform.openai.com/docs/pricing)
    (r"gpt-4o-mini", 0.15, 0.60),
    (r"gpt-4o", 2.50, 10.00),
    (r"gpt-4\.1-nano", 0.10, 0.40),
    (r"gpt-4\.1-mini", 0.40, 1.60),
    (r"gpt-4\.1", 2.00, 8.00),
    (r"gpt-5-nano", 0.05, 0.40),
    (r"gpt-5-mini", 0.25, 2.00),
    (r"gpt-5", 1.25, 10.00),
    (r"o4-mini", 1.10, 4.40),
    (r"o3-mini", 1.10, 4.40),
    (r"(^|/)o3", 2.00, 8.00),
    # Anthropic (docs.anthropic.com/en/docs/about-claude/pricing)
    (r"claude-opus-4-5", 5.00, 25.00),
    (r"claude-(opus-4|4-opus|3-opus)", 15.00, 75.00),
    (r"claude-(sonnet-4|4-sonnet|3-7-sonnet|3-5-sonnet)", 3.00, 15.00),
    (r"claude-haiku-4-5", 1.00, 5.00),
    (r"claude-3-5-haiku", 0.80, 4.00),
    (r"claude-3-haiku", 0.25, 1.25),
]


def price_of(model: str) -> tuple[float, float] | None:
    """(input, output) dollars per million tokens for ``model``, or None if unknown."""
    name = model.lower()
    for pattern, p_in, p_out in PRICES:
        if re.search(pattern, name):
            return p_in, p_out
    return None


def cost_usd(input_tokens: int, output_tokens: int, prices: tuple[float, float] | None
             ) -> float | None:
    """Dollars for one call at ``prices`` (per million tokens); None when unpriced."""
    if prices is None:
        return None
    return (input_tokens * prices[0] + output_tokens * prices[1]) / 1e6
