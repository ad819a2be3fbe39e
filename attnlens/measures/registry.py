"""``MEASURES``: the one list of measures, read by the report, the CLI, the findings and the docs.

Each entry names a folder ``attnlens/measures/<name>/``; what the folder offers is found there
by convention, so adding a measure is one new folder and one line here:

- ``section``: the class of its report section in ``<name>/section.py`` ("" when it has none);
  ``report=True`` makes it one of `attnlens analyze`'s default sections, built with the
  class's ``for_report()`` (its report defaults), in the order of this list;
- ``command``: its command, the module ``cli/<command>.py`` ("" when it has none); the
  commands appear in `attnlens --help` in this order, after the report commands;
- ``findings``: whether ``<name>/findings.py`` holds finders (sentences of the report's
  summary, written from the saved tables: ``attnlens.report.findings``);
- ``docs``: its reference page, ``docs/<docs>``, listed in the docs index (``docs/README.md``);
- ``shown_in``: for a measure without a section of its own, the measure whose section shows it.

Importing this module imports nothing but the standard library (``attnlens --help`` reads it):
the sections, finders and commands are imported by name where they are used
(``attnlens.report.analyze``, ``attnlens.report.findings``, ``attnlens.cli.app``).
``tests/test_registry.py`` checks that every folder is registered and that every registered
measure has what its entry promises.
"""

from __future__ import annotations

from dataclasses import dataclass

PACKAGE = "attnlens.measures"


@dataclass(frozen=True)
class Measure:
    """One measure: a folder of ``attnlens/measures/`` and what it offers (see the module)."""

    name: str
    summary: str
    section: str = ""
    report: bool = False
    command: str = ""
    findings: bool = False
    docs: str = ""
    shown_in: str = ""

    @property
    def package(self) -> str:
        return f"{PACKAGE}.{self.name}"

    @property
    def section_module(self) -> str:
        return f"{self.package}.section"

    @property
    def findings_module(self) -> str:
        return f"{self.package}.findings"


MEASURES: tuple[Measure, ...] = (
    Measure("heads", "Clark et al.'s per-head statistics and tested positional, syntactic "
            "and rare-word roles", section="HeadRolesSection", report=True, command="heads",
            findings=True, docs="heads.md"),
    Measure("lm_heads", "previous-token, duplicate-token, induction, sink, retrieval and "
            "streaming heads of language models, ablated against random heads",
            section="LmHeadsSection", report=True, command="heads", findings=True,
            docs="lm-heads.md"),
    Measure("spectrum", "how low-rank each head's attention is (Linformer) and the cost of "
            "low-rank approximations", section="SpectrumSection", report=True,
            command="spectrum", findings=True, docs="spectrum.md"),
    Measure("circuits", "spectra of each head's QK and OV circuits and the layers' shared "
            "query/key subspaces", shown_in="spectrum", findings=True, docs="spectrum.md"),
    Measure("asymmetry", "query/key asymmetry of the weights and of the attention patterns",
            section="AsymmetrySection", report=True, command="asymmetry", findings=True,
            docs="asymmetry.md"),
    Measure("collapse", "rank collapse with depth: block variants, paths of heads, random "
            "stacks", section="CollapseSection", report=True, command="collapse",
            findings=True, docs="collapse.md"),
    Measure("rollout", "attention rollout and attention flow: which input tokens each "
            "position draws on", section="RolloutSection", report=True, command="rollout",
            docs="rollout.md"),
    Measure("sparse", "how much of each head a local, global or BigBird pattern keeps",
            section="SparseSection", report=True, command="sparse", docs="sparse.md"),
    Measure("linear", "the fast-weight view: key interference and the cost of linearising "
            "each head", section="LinearSection", report=True, command="linear",
            docs="linear.md"),
    Measure("pruning", "head importance, pruning curves on a real metric, L0 head gates and "
            "structural export", command="prune", findings=True, docs="prune.md"),
)

BY_NAME: dict[str, Measure] = {m.name: m for m in MEASURES}


def measure_commands() -> list[str]:
    """The measures' command modules (``cli/<command>.py``), in registry order, each once
    (`attnlens heads` runs both heads and lm_heads)."""
    return list(dict.fromkeys(m.command for m in MEASURES if m.command))


def report_measures() -> list[Measure]:
    """The measures whose sections `attnlens analyze` runs by default, in report order."""
    return [m for m in MEASURES if m.report]


def docs_index() -> str:
    """The measures' table of the docs index (``docs/README.md``), one row per measure."""
    rows = ["| measure | what it shows | command | in `analyze` | reference | code |",
            "|---|---|---|---|---|---|"]
    for m in MEASURES:
        command = f"`attnlens {m.command}`" if m.command else f"(shown by `{m.shown_in}`)"
        report = "yes" if m.report else f"with `{m.shown_in}`" if m.shown_in else "no"
        code = f"[measures/{m.name}/](../attnlens/measures/{m.name}/)"
        rows.append(f"| `{m.name}` | {m.summary} | {command} | {report} | [{m.docs}]({m.docs}) "
                    f"| {code} |")
    return "\n".join(rows) + "\n"
