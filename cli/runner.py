"""The one path every command takes: check -> read the corpus -> load the model -> run -> print.

``command(app, name, ...)`` registers a command body ``fn(run: CommandRun, **own_options)``.
It adds the shared option groups (model, corpus, batching, output, quiet: ``options.py``) to
the body's own options, and before calling the body checks every shared option, path and
output folder without importing torch, transformers, pandas or matplotlib. The body checks its
own options first (plain Python), then imports what it needs and calls ``run.write_report``
or the ``run.read_corpus`` / ``run.load_model`` steps and writes inside ``run.writing()``.

Adding a command: a module ``cli/<name>.py`` with ``register(app)`` that calls ``command``,
listed in ``cli/app.py:COMMAND_MODULES``; heavy imports go inside the body.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import typing
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from attnlens.cli import options

from attnlens.runs import collector

if TYPE_CHECKING:
    from attnlens.data.corpus import Corpus
    from attnlens.report.sections import Section, SectionOutput


class Interrupted(Exception):
    """Ctrl-C during a command (typer would otherwise turn it into a silent exit 130)."""


@dataclass
class ModelOptions:
    """MODEL, --device, --dtype, --allow-pickle, --backend."""

    name: str | None = None
    device: str = "cpu"
    dtype: str = "float32"
    allow_pickle: bool = False
    device_map: str | None = None  # --device-map / --max-memory (commands that offer them)
    max_memory: str | None = None
    backend: str = "auto"

    def check(self) -> None:
        from attnlens.device import check_device_name, check_dtype_name
        from attnlens.loaders.backends import check_backend
        from attnlens.loaders.checkpoint import read_config, resolve_checkpoint
        from attnlens.loaders.config_checks import check_config
        from attnlens.loaders.device_map import check_device_map

        check_backend(self.backend)
        check_device_name(self.device)
        check_dtype_name(self.dtype)
        check_device_map(self.device_map, self.max_memory)
        folder = resolve_checkpoint(self.name)
        check_config(read_config(folder), str(folder / "config.json"))

    def load(self):
        """``(HookedTransformer, Tokenizer)``."""
        from attnlens.loaders import load
        from attnlens.loaders.device_map import parse_max_memory

        return load(self.name, device=self.device, dtype=self.dtype,
                    allow_pickle=self.allow_pickle, device_map=self.device_map,
                    max_memory=parse_max_memory(self.max_memory), backend=self.backend)


@dataclass
class CorpusOptions:
    """--text, --treebank, --parse (neither: the embedded sample treebank), --max-sentences."""

    text: Path | None = None
    treebank: Path | None = None
    parse: bool = False
    max_sentences: int | None = None

    @property
    def given(self) -> bool:
        return bool(self.text or self.treebank or self.parse)

    def check(self) -> None:
        from attnlens.data.corpus import check_corpus_options

        check_corpus_options(self.text, self.treebank, self.parse)


@dataclass
class OutputOptions:
    """--out, (for commands that draw) --format, --force and (for runs that can continue)
    --resume and --checkpoint-every.

    The folder is an ``attnlens.runs.outputs.OutputFolder``: checked before anything loads (new or
    empty unless --force; never the source model or a folder holding an input; --resume only
    of the same run, compared through the run's manifest), written beside and published whole
    when the command ends, so it holds a complete run or what it held before.
    """

    folder: Path
    format_text: str | None = None
    formats: tuple[str, ...] = ()
    force: bool = False
    resume: bool = False
    resumable: bool = False
    checkpoint_every: int | None = None
    target: Any = field(default=None, repr=False)  # the checked OutputFolder
    manifest: dict | None = None

    def check(self, protected: Sequence[tuple[str, Path]] = ()) -> None:
        from attnlens.runs.io import figure_formats
        from attnlens.runs.outputs import OutputFolder

        if self.format_text is not None:
            self.formats = figure_formats(self.format_text)
        self.target = OutputFolder(self.folder, force=self.force, resume=self.resume,
                                   resumable=self.resumable, protected=protected).check()

    def record(self, command: str, options: dict[str, Any], inputs: dict[str, Any],
               model: ModelOptions | None) -> None:
        """A resumable run's manifest (options, input and model hashes); --resume checks it."""
        if not self.resumable:
            return
        from attnlens.loaders.checkpoint import checkpoint_fingerprint
        from attnlens.runs.manifest import build_manifest

        fingerprint = checkpoint_fingerprint(model.name) if model is not None else None
        self.manifest = build_manifest(command, options, inputs, fingerprint)
        self.target.verify_manifest(self.manifest)

    @property
    def resumes(self) -> bool:
        """The run continues saved progress (analyzer checkpoints, finished pruning steps)."""
        return self.target.resumes_partial

    @contextmanager
    def writing(self) -> Iterator[Path]:
        """The work folder, published onto --out when the block ends without an error."""
        with self.target.writing(self.manifest) as work:
            yield work


@dataclass
class CommandRun:
    """One command invocation: its shared options and the steps every command takes."""

    model: ModelOptions | None = None
    corpus: CorpusOptions | None = None
    output: OutputOptions | None = None
    batch_size: int = 16
    batch_tokens: int | None = None  # padded tokens per batch (None: batch_size sentences)
    max_length: int | None = None  # None: the model's trained length, set by load_model
    max_length_source: str | None = None  # where load_model's max_length comes from
    query_block: int | None = None  # query rows per attention block (None: from free memory)
    whole_matrix_limit: int = 4096  # longest input whole-matrix analyses may read
    quiet: bool = False
    inputs: dict[str, Path | None] = field(default_factory=dict)  # option name -> input file
    input_kinds: dict[str, str] = field(default_factory=dict)  # option name -> what it holds
    console: Any = field(default=None, repr=False)
    dist: Any = field(default=None, repr=False)  # distributed.DistContext once started
    null: str = "none"  # --null (report commands; "none" elsewhere)
    null_seed: int = 0

    def check(self) -> None:
        """Every shared option, path and output folder; imports nothing heavy."""
        if self.corpus is not None:
            self.corpus.check()
        self.null_options()  # --null spelled right (imports nothing heavy)
        from attnlens.runs.io import check_input_file
        from attnlens.runs.manifest import option_label

        for name, path in self.inputs.items():
            check_input_file(path, option_label(name), self.input_kinds.get(name, "input"))
        if self.output is not None:
            self.output.check(self._protected())
        if self.model is not None:
            self.model.check()

    def _protected(self) -> list[tuple[str, Path]]:
        """What --out may neither be nor hold: the input files and the source model."""
        from attnlens.errors import AttnlensError
        from attnlens.runs.manifest import option_label

        protected = [(f"the input file {option_label(name)}", Path(path))
                     for name, path in self.inputs.items() if path is not None]
        if self.model is not None:
            from attnlens.loaders.checkpoint import resolve_checkpoint

            with contextlib.suppress(AttnlensError):  # ModelOptions.check names the problem
                protected.append(("the source model", resolve_checkpoint(self.model.name)))
        return protected

    @property
    def show_progress(self) -> bool:
        return not self.quiet

    def null_options(self):
        """``--null`` / ``--null-seed`` as ``NullOptions`` (checked)."""
        from attnlens.report.null_run import NullOptions

        return NullOptions(self.null, self.null_seed)

    def read_corpus(self) -> Corpus:
        """The corpus files read (no tokenizer needed, so before the model loads)."""
        from attnlens.data.corpus import load_corpus

        options = self.corpus or CorpusOptions()
        return load_corpus(text=options.text, treebank=options.treebank, parse=options.parse,
                           max_sentences=options.max_sentences)

    def load_model(self):
        """``(HookedTransformer, Tokenizer)`` from MODEL and the loading options, with the
        query-block settings (--query-block, --whole-matrix-limit) applied; a --max-length
        left out becomes the model's trained length."""
        collector.freeze_imports()  # the command's imports are done (attnlens/runs/collector.py)
        model, tokenizer = (self.model or ModelOptions()).load()
        if self.max_length is None:
            from attnlens.loaders.trained_length import resolved_max_length

            found = resolved_max_length(model.cfg.source.get("path"))
            self.max_length, self.max_length_source = found.tokens, found.source
        elif self.max_length_source is None:
            self.max_length_source = "--max-length"
        set_blocks = getattr(model, "set_query_blocks", None)
        if set_blocks is not None:
            from attnlens.model.query_blocks import QueryBlocks

            set_blocks(QueryBlocks(self.query_block, self.whole_matrix_limit))
        collector.settle()  # imports and model loaded: freeze them (attnlens/runs/collector.py)
        return model, tokenizer

    def start_processes(self):
        """Under ``torchrun``: join the process group, each rank on its own device (``cuda``
        becomes ``cuda:LOCAL_RANK``); else a single process. Returns the ``DistContext``."""
        from attnlens import distributed

        self.dist = distributed.context()
        if self.model is not None:
            self.model.device = distributed.rank_device(self.model.device, self.dist)
        distributed.init(self.dist, self.model.device if self.model else "cpu")
        return self.dist

    def end_processes(self) -> None:
        """Leave the process group (after a barrier) if ``start_processes`` joined one."""
        from attnlens import distributed

        if self.dist is not None:
            distributed.finish(self.dist)

    def writing(self):
        """``with run.writing() as work:`` the folder to write into; it becomes --out, whole,
        when the block ends (see ``OutputOptions``). Under torchrun only rank 0 writes: the
        other ranks get --out's path and write nothing."""
        if self.dist is not None and not self.dist.is_main:
            return contextlib.nullcontext(self.output.folder)
        return self.output.writing()

    def checkpoint(self, work: Path):
        """Analyzer checkpoints in ``work`` for a resumable run (None otherwise)."""
        if self.output is None or not self.output.resumable:
            return None
        if self.dist is not None and self.dist.active:
            if self.output.checkpoint_every or self.output.resume:
                from attnlens.errors import ConfigError

                raise ConfigError("--checkpoint-every and --resume work in one process; run "
                                  "without torchrun to checkpoint.")
            return None
        from attnlens.runs.checkpointing import AnalysisCheckpoint

        return AnalysisCheckpoint(work, self.output.checkpoint_every, resume=self.output.resumes)

    def note(self, message: str) -> None:
        """A line on stderr (what was written, timings); stdout is kept for results."""
        if self.console is None:
            from rich.console import Console

            self.console = Console(stderr=True)
        self.console.print(message)

    def write_report(
        self, sections: Sequence[Section] | None, use_corpus: bool = True,
        corpus_name: str = "none", print_summaries: bool = True,
        prune_dir: Path | None = None, corpus: Corpus | None = None,
    ) -> list[SectionOutput]:
        """Run report ``sections`` (None: every section of `analyze`) over the corpus (read
        here unless given), write their tables, figures, run.json and index.html, print the
        summaries."""
        from attnlens.runs.stopwatch import LOAD_MODEL, READ_CORPUS, TOKENIZE, phase

        if corpus is None and use_corpus:
            with phase(READ_CORPUS):
                corpus = self.read_corpus()
        ctx = self.start_processes()  # torchrun: each rank analyses a share; rank 0 writes
        with phase(LOAD_MODEL):
            model, tokenizer = self.load_model()
        with phase(TOKENIZE):
            batches = (corpus.batches(tokenizer, self.batch_size, self.max_length,
                                      self.batch_tokens) if corpus else [])
        from attnlens.report.analyze import analyze

        with self.writing() as work:
            outputs = analyze(
                model, tokenizer, batches, work, sections=sections, formats=self.output.formats,
                show_progress=self.show_progress,
                corpus_name=corpus.name if corpus else corpus_name, prune_dir=prune_dir,
                dist=ctx, checkpoint=self.checkpoint(work), null=self.null_options(),
                example_pages=functools.partial(_example_pages, max_length=self.max_length),
                resolved_options=self.resolved_options(),
            )
        self.end_processes()
        if not ctx.is_main:
            return outputs
        out = self.output.folder
        if print_summaries:
            for output in outputs:
                typer.echo(output.summary)
        n_tables = sum(len(o.tables) for o in outputs)
        n_figures = sum(len(o.figures) for o in outputs)
        self.note(f"wrote {n_tables} tables and {n_figures} figures to {out}/ "
                  f"(open {out / 'index.html'})")
        self._note_null(out)
        return outputs


    def resolved_options(self) -> dict[str, Any]:
        """Options whose value is settled once the model is loaded (a left-out --max-length
        becomes the model's trained length), as the run record states them."""
        if self.max_length is None:
            return {}
        return {"max_length": self.max_length, "max_length_source": self.max_length_source}

    def _note_null(self, out: Path) -> None:
        """The null model and its cost, from the report's run.json (stderr)."""
        import json

        from attnlens.report.null_run import null_note

        try:
            run = json.loads((out / "run.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        line = null_note(run)
        if line:
            self.note(line)


def _example_pages(model, tokenizer, out: Path, max_length: int | None = None) -> list[Path]:
    """Viewer pages of the head examples (attnlens.viewer.examples), for every report: each
    page reads at most ``example_length`` tokens."""
    from attnlens.viewer.examples import write_example_pages

    return write_example_pages(model, tokenizer, out,
                               max_length=example_length(model, max_length))


def example_length(model, max_length: int | None) -> int | None:
    """Tokens an example page reads: the run's ``--max-length`` (what was analysed), at most
    the whole-matrix limit, since a page holds one layer's whole pattern at a time
    (docs/long-context.md); None (the model's trained length) without either."""
    blocks = getattr(model, "query_blocks", None)
    limit = None if blocks is None else blocks.whole_matrix_limit
    if max_length is None or limit is None:
        return max_length if limit is None else limit
    return min(max_length, limit)


# Registration ------------------------------------------------------------------------------
# command name -> {--option: default} of its int and float options: the sizes an out-of-memory
# message names when the command was given more than the default (cli/known_errors.py).
NUMERIC_DEFAULTS: dict[str, dict[str, Any]] = {}


def _shared_run(values: dict[str, Any], resumable: bool) -> CommandRun:
    model = corpus = output = None
    if "device" in values:
        model = ModelOptions(values.get("model"), values["device"], values["dtype"],
                             values["allow_pickle"], values.get("device_map"),
                             values.get("max_memory"), values.get("backend", "auto"))
    if "text" in values:
        corpus = CorpusOptions(values["text"], values["treebank"], values["parse"],
                               values.get("max_sentences"))
    if "out" in values:
        output = OutputOptions(values["out"], values.get("fmt"), force=values["force"],
                               resume=values.get("resume", False), resumable=resumable,
                               checkpoint_every=values.get("checkpoint_every"))
    return CommandRun(model=model, corpus=corpus, output=output,
                      batch_size=values.get("batch_size", 16),
                      batch_tokens=values.get("batch_tokens") or None,
                      max_length=values.get("max_length"),
                      query_block=values.get("query_block"),
                      whole_matrix_limit=values.get("whole_matrix_limit", 4096),
                      quiet=values.get("quiet", False),
                      null=values.get("null", "none"), null_seed=values.get("null_seed", 0))


@contextmanager
def _libraries_quiet(quiet: bool) -> Iterator[None]:
    """Under --quiet, transformers' warnings are silenced too (they would make an ``Error:``
    line one of several): its verbosity is set to errors for the command, then restored."""
    import os
    import sys

    if not quiet:
        yield
        return
    saved_env = os.environ.get("TRANSFORMERS_VERBOSITY")
    os.environ["TRANSFORMERS_VERBOSITY"] = "error"  # read when transformers is imported
    logging = sys.modules.get("transformers.utils.logging")
    saved_level = logging.get_verbosity() if logging is not None else None
    if logging is not None:
        logging.set_verbosity_error()
    try:
        yield
    finally:
        if saved_env is None:
            os.environ.pop("TRANSFORMERS_VERBOSITY", None)
        else:
            os.environ["TRANSFORMERS_VERBOSITY"] = saved_env
        logging = sys.modules.get("transformers.utils.logging")
        if logging is not None:
            logging.set_verbosity(saved_level if saved_level is not None else
                                  logging.WARNING)


def _info(param: inspect.Parameter):
    """The typer ``OptionInfo`` / ``ArgumentInfo`` of a parameter: in its ``Annotated`` type
    or (the older spelling) its default; None for neither."""
    if typing.get_origin(param.annotation) is typing.Annotated:
        found = [m for m in param.annotation.__metadata__ if hasattr(m, "param_decls")]
        if found:
            return found[-1]
    return param.default if hasattr(param.default, "param_decls") else None


def _base_type(param: inspect.Parameter):
    """The parameter's type without ``Annotated``."""
    if typing.get_origin(param.annotation) is typing.Annotated:
        return typing.get_args(param.annotation)[0]
    return param.annotation


def _default(param: inspect.Parameter) -> Any:
    """The value an option takes when not given."""
    info = param.default
    return info.default if hasattr(info, "param_decls") else info


def _spelling(info) -> str:
    """An option's long name (``--matrix-sentences``) from its declarations."""
    decls = [d for d in info.param_decls if isinstance(d, str)]
    if isinstance(info.default, str) and info.default.startswith("-"):
        decls.insert(0, info.default)  # Annotated style: the first name is passed as default
    return next(d for d in decls if d.startswith("--")).split("/")[0]


def _numeric_options(params: Sequence[inspect.Parameter]) -> list[tuple[str, str, bool, Any, Any]]:
    """(name, --option, integer, declared min, declared max) of every int or float option:
    what ``attnlens.numeric.check_number`` checks before the command runs."""
    found = []
    for p in params:
        base = _base_type(p)
        kinds = set(typing.get_args(base)) or {base}
        number = next((k for k in (int, float) if k in kinds), None)
        info = _info(p)
        if number is None or info is None or type(info).__name__ != "OptionInfo":
            continue
        found.append((p.name, _spelling(info), number is int, getattr(info, "min", None),
                      getattr(info, "max", None)))
    return found


def _in_panel(param: inspect.Parameter) -> inspect.Parameter:
    """A command's own option without a ``rich_help_panel`` goes to the Method panel."""
    info = _info(param)
    if (type(info).__name__ == "OptionInfo" and info.rich_help_panel is None
            and not info.hidden):
        info.rich_help_panel = options.METHOD_PANEL
    return param


def _take_alias(values: dict[str, Any], key: str, new: inspect.Parameter) -> None:
    """The hidden old option ``values[key]`` given: warn, and pass its value on to the
    option that replaced it (both given: an error)."""
    value = values.pop(key)
    if value is None:
        return
    import sys

    from attnlens.errors import ConfigError

    old = "--" + key.removeprefix("alias_").replace("_", "-")
    spelling = _spelling(_info(new))
    if values[new.name] != _default(new):
        raise ConfigError(f"{old} is the old name of {spelling}; give {spelling} only.")
    print(f"Warning: {old} is an old name; use {spelling} (it means the same).",
          file=sys.stderr)
    values[new.name] = value


def _groups(name: str, names: set[str]) -> set[str]:
    """The shared option groups a command declares, each whole (else a TypeError naming what
    is missing: a programming mistake, found when the app is built)."""
    found = set()
    for group, members in options.GROUPS.items():
        present = [m for m in members if m in names]
        if present and len(present) < len(members):
            missing = ", ".join(m for m in members if m not in names)
            raise TypeError(f"command {name!r} takes part of the {group} options; add {missing}.")
        if present:
            found.add(group)
    if "quiet" not in found:
        raise TypeError(f"command {name!r} must take quiet: Quiet = False.")
    return found


def _usage_line(arguments: str) -> type:
    """A command class whose usage line shows ``[OPTIONS] arguments``."""
    from typer.core import TyperCommand

    class Command(TyperCommand):
        def collect_usage_pieces(self, ctx) -> list[str]:
            return [*([self.options_metavar] if self.options_metavar else []), arguments]

    return Command


def command(
    app: typer.Typer,
    name: str,
    *,
    inputs: dict[str, str] | None = None,
    usage: str | None = None,
    aliases: dict[str, str] | None = None,
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register ``body(run, **options)`` as ``name``.

    The body's signature declares every option, the shared ones through the ``Annotated``
    aliases of ``options.py`` (``treebank: Treebank = None``); ``run`` is the
    ``CommandRun`` built from the shared groups it declares (checked before the body runs:
    paths, output folder, model config) and is left out of the command line. A declared
    ``resume`` makes the run resumable (its manifest), ``checkpoint_every`` adds analyzer
    checkpoints. ``inputs``: the body's own options that name input files, with what each
    holds (checked first, hashed for --resume; --out may not hold them). ``usage``: the
    arguments as the usage line shows them (e.g. ``[MODEL] TEXT`` for a command that reads
    an optional MODEL before TEXT itself), instead of Click's own. ``aliases``: a hidden old
    option's parameter (``alias_sentences``) -> the parameter it now feeds (it warns). The
    body's own options without a panel go to the Method panel of ``--help``.
    """

    def decorate(body: Callable[..., None]) -> Callable[..., None]:
        hints = typing.get_type_hints(body, include_extras=True)
        params = [
            _in_panel(p.replace(annotation=hints.get(p.name, p.annotation)))
            for p in inspect.signature(body).parameters.values() if p.name != "run"
        ]
        by_name = {p.name: p for p in params}
        groups = _groups(name, set(by_name))
        resumable, checkpoints = "resume" in groups, "checkpoints" in groups
        renamed = {old: by_name[new] for old, new in (aliases or {}).items()}
        numeric = _numeric_options(params)
        NUMERIC_DEFAULTS[name] = {option: _default(by_name[key]) for key, option, *_ in numeric}

        @functools.wraps(body)
        def wrapper(**values: Any) -> None:
            from attnlens.numeric import check_number

            for key, option, integer, low, high in numeric:  # finite, in range, no overflow
                check_number(option, values.get(key), integer=integer, low=low, high=high)
            for old, new in renamed.items():
                _take_alias(values, old, new)
            shared = {k: values[k] for k in options.SHARED if k in values}
            run = _shared_run(shared, resumable)
            run.inputs = {k: shared[k] for k in ("text", "treebank") if k in shared}
            run.inputs.update({k: values[k] for k in inputs or {}})
            run.input_kinds = {"text": "text, one sentence per line",
                               "treebank": "CoNLL-U treebank", **(inputs or {})}
            run.check()
            if run.model is None:  # no model to load: the collector's hold ends here
                collector.settle()
            if run.output is not None:
                own = {k: v for k, v in values.items() if k not in shared}
                run.output.record(name, {**shared, **own}, run.inputs, run.model)
                # A finished report is final; a finished pruning run may still be exported.
                if checkpoints and run.output.target.resumes_complete:
                    run.note(f"{run.output.folder}/ already holds this run, complete; "
                             "nothing to resume.")
                    return
            try:
                with _libraries_quiet(run.quiet):
                    body(run, **values, **{old: None for old in renamed})
            except KeyboardInterrupt as exc:
                raise Interrupted from exc

        del wrapper.__wrapped__  # typer reads the signature below: the body's, without run
        wrapper.__signature__ = inspect.Signature(params)
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        app.command(name, **({"cls": _usage_line(usage)} if usage else {}))(wrapper)
        return body

    return decorate
