"""A run's settings from a TOML file: one table per settings model, checked by that model.

:func:`read_sections` reads ``path`` and returns, per section the caller names (e.g.
``{"planner": PlannerConfig, "eval": EvalOptions}``), the keys the file gives, as a dict
(nested tables for nested models: ``[planner.budgets]``). Every key must be a field of the
section's model (recursively), and every value must pass that model's validation, so a
typo or a wrong type is a :class:`ConfigFileError` naming the file, the section and the
key. Keys the file leaves out are left out: the caller fills them (from flags, or the
models' defaults) and validates the whole again, so a required field may come from
elsewhere (an LLM's model name from ``--model``).

Not covered: includes, environment-variable interpolation, writing a file back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import tomllib
from pydantic import BaseModel, ValidationError


class ConfigFileError(ValueError):
    """A run configuration file that cannot be read or does not fit its models."""


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a field holds (``Budgets``, ``Budgets | None``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _unknown_keys(model: type[BaseModel], data: dict[str, Any], where: str) -> list[str]:
    out = []
    for key, value in data.items():
        field = model.model_fields.get(key)
        if field is None:
            known = ", ".join(model.model_fields)
            out.append(f"[{where}] {key}: unknown key (known: {known})")
            continue
        inner = _model_of(field.annotation)
        if inner is not None and isinstance(value, dict):
            out += _unknown_keys(inner, value, f"{where}.{key}")
    return out


def _where(section: str, loc: tuple[Any, ...]) -> str:
    keys = [str(k) for k in loc]
    table = ".".join([section, *keys[:-1]]) if len(keys) > 1 else section
    return f"[{table}] {keys[-1] if keys else ''}".rstrip()


def read_sections(path: str | Path, models: dict[str, type[BaseModel]],
                  reserved: dict[str, dict[str, str]] | None = None
                  ) -> dict[str, dict[str, Any]]:
    """The file's sections, each checked against its model (see the module docstring).
    ``reserved`` names keys of a section the file may not set, with where they come from
    instead (``{"llm": {"role": "[planner] roles"}}``)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigFileError(f"{path}: no such file (--config)") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigFileError(f"{path}: not valid TOML: {e}") from None
    problems = [f"[{name}]: unknown section (known: {', '.join(models)})"
                for name in data if name not in models]
    for name, value in data.items():
        if name in models and not isinstance(value, dict):
            problems.append(f"{name}: a table is expected ([{name}]), not a value")
    sections = {name: data.get(name, {}) for name in models}
    for name, keys in (reserved or {}).items():
        section = sections.get(name)
        for key in keys if isinstance(section, dict) else ():
            if key in section:
                problems.append(f"[{name}] {key}: set per unit, not here (use {keys[key]})")
    for name, model in models.items():
        section = sections[name]
        if not isinstance(section, dict):
            continue
        unknown = _unknown_keys(model, section, name)
        problems += unknown
        if unknown:
            continue
        try:
            model.model_validate(section)
        except ValidationError as e:
            # a key the file leaves out may come from a flag: only what it gives is judged
            problems += [f"{_where(name, err['loc'])}: {err['msg']}" for err in e.errors()
                         if err["type"] != "missing"]
    if problems:
        raise ConfigFileError(f"{path}: " + "; ".join(problems))
    return sections
