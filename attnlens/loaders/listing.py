"""The architectures attnlens loads as table rows: converters, their parity measured on tiny
random models, and the hf backend's coverage of every model_type (`attnlens models`)."""

from __future__ import annotations

HEAD_NAMES = {None: "hidden states", "mlm": "masked LM", "classifier": "classifier", "lm": "LM"}


def model_rows() -> list[dict[str, str]]:
    """One row per family: HF architectures, output heads, whether it exports back."""
    from attnlens.loaders.registry import CONVERTERS

    rows = []
    for model_type, conv in CONVERTERS.items():
        heads = dict.fromkeys(HEAD_NAMES[h] for h in conv.architectures.values())
        rows.append({
            "family": conv.family or model_type,
            "model_type": model_type,
            "architectures": ", ".join(conv.architectures),
            "heads": ", ".join(heads),
            "export": "yes" if conv.export is not None else "no",
        })
    return rows


def verified_rows(
    model_types: list[str] | None, show_progress: bool
) -> tuple[list[dict[str, str]], list[str]]:
    """One row per architecture with the parity measured on a tiny random model, and the
    architectures above the tolerance."""
    from attnlens.loaders.registry import CONVERTERS
    from attnlens.loaders.verify import TINY_TOL, verify_all
    from attnlens.progress import progress_bar

    total = sum(len(c.architectures) for t, c in CONVERTERS.items()
                if not model_types or t in model_types)
    with progress_bar("tiny models", total=total, enabled=show_progress) as advance:
        measured = verify_all(model_types, progress=advance)

    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:.1e}" if value else "0"

    rows = [{
        "family": CONVERTERS[m["model_type"]].family or m["model_type"],
        "model_type": m["model_type"],
        "architecture": m["architecture"],
        "head": HEAD_NAMES[CONVERTERS[m["model_type"]].architectures[m["architecture"]]],
        "attention": fmt(m["attention"]),
        "hidden states": fmt(m["hidden"]),
        "logits": fmt(m.get("logits")),
        f"within {TINY_TOL:g}": "yes" if m["within_tolerance"] else "NO",
    } for m in measured]
    return rows, [m["architecture"] for m in measured if not m["within_tolerance"]]


def coverage_rows(chosen: list[str] | None, show_progress: bool):
    """`--verify --all`: the hf backend's sweep over every model_type (or ``chosen``), one
    ``loaders.verify_hf`` row each."""
    from attnlens.loaders.verify_hf import model_types, sweep
    from attnlens.progress import progress_bar

    known = model_types()
    unknown = [f for f in chosen or [] if f not in known]
    if unknown:
        from attnlens.errors import ConfigError

        raise ConfigError(f"unknown --family {', '.join(unknown)}: not a model_type of the "
                          "installed transformers.")
    types = chosen or known
    with progress_bar("model types", total=len(types), enabled=show_progress) as advance:
        return sweep(types, progress=advance)


def check_coverage(rows) -> None:
    """Refuse a sweep where attnlens computed something else than eager attention (a wrong
    result, not a refusal)."""
    differing = [r.model_type for r in rows if r.status == "differs"]
    if differing:
        from attnlens.errors import ConfigError

        raise ConfigError(f"the hf backend differs from eager attention for "
                          f"{', '.join(differing)} (figures in the table above); report it.")


def coverage_row(row) -> dict[str, str]:
    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:.1e}" if value else "0"

    status = row.status if row.status == "verified" else f"{row.status}: {row.reason}"
    return {"model_type": row.model_type, "architecture": row.architecture,
            "backend": row.backend, "attention": fmt(row.attention),
            "hidden states": fmt(row.hidden), "status": status}
