"""Forward passes a report needs besides the corpus pass, run in a forked process beside it.

The language-model probes (``LmHeads.synthetic_runs``: ~18k tokens of synthetic sequences,
~2.8 s of the demo) read the model and the measure's own inputs, not the corpus pass's
results. On CPU the corpus pass leaves a core mostly idle (its analyzers are Python between
the forward's matrix products) and small forward passes scale poorly over threads, so the
probes run in a forked process at one thread while the main process runs the corpus pass,
the null pass and the other sections' tables; the main process takes the result (pickled back
through a pipe) where it needs it, and writes the sections that wait for it after the others
(``report.analyze.write_order``). What a section computes from the weights alone runs in a
child the same way (``Section.start_beside``: the spectrum section's weight spectra). The
second core is the child's only while the main process's idle OpenMP thread sleeps instead
of spinning (``attnlens.runs.openmp``: the program sets ``OMP_WAIT_POLICY=PASSIVE``). The
numbers are the same: the same code on the same inputs, and these passes give bitwise the
same states at one thread as at two (``tests/test_side_work.py``; the sample report's tables
are identical with ``ATTNLENS_SIDE_WORKERS=0``). The null model's pass is not moved: its
float32 sums at one thread round differently from two (its null columns moved by ~1e-9
relative), and a forked child cannot use more than one thread (GNU OpenMP's pool does not
survive a fork: the child hangs).

``side_workers_allowed`` says where forking is safe and useful: Linux, more than one usable
CPU, the model on the CPU (a forked child may not use a CUDA context), one process (not under
``torchrun``), and ``ATTNLENS_SIDE_WORKERS`` not ``0``; elsewhere the work runs in this
process, exactly as before. Ctrl-C and SIGTERM are held back while the child is forked
(``runs.held_signals``: one arriving mid-fork would otherwise be lost). The child runs at one
torch thread, resets SIGINT and SIGTERM (the parent reports an interruption), ends with
``os._exit`` (never the parent's ``atexit`` handlers, such as the output folder's lock),
writes no file, ends with its parent (a parent killed with SIGKILL leaves no child behind:
``PR_SET_PDEATHSIG``, and the child closes its inherited copy of the pipe's read end), and
returns the wall seconds of every ``attnlens.runs.stopwatch`` phase it timed, which the
parent records in ``run.json``'s fixed costs under ``SIDE_PREFIX`` (the time it waited under
``WAIT_PREFIX``).

Work that either process may do goes to the one that asks first (``Claim``, made before
the fork: the language-model heads' long probes run in the probes' child when it finishes
the rest and the parent's passes are over before the parent needs them, and in the parent
otherwise). The claim is one byte in a pipe: a pipe's read is atomic, so exactly one process
reads it; the child waits for the parent's go (a byte in a second pipe, written when the
parent opens the claim, takes it or gives up). Nothing lies on disk; a child killed after
claiming leaves the parent to find the claim gone and the child's pipe closed
(``SideJob.result`` raises), never to wait for ever; a parent killed leaves no child
(``PR_SET_PDEATHSIG``, below).
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import sys
import traceback
from collections.abc import Callable
from typing import Any

from attnlens.runs import stopwatch
from attnlens.runs.held_signals import signals_held

SIDE_PREFIX = "beside the corpus pass: "  # run.json's fixed costs of work done in a child
WAIT_PREFIX = "waited for: "  # what the parent waited for a child's result


def side_workers_allowed(model: Any, dist: Any = None) -> bool:
    """Whether ``side_job`` may fork (see the module docstring)."""
    if os.environ.get("ATTNLENS_SIDE_WORKERS", "1").strip() == "0":
        return False
    if not sys.platform.startswith("linux"):
        return False
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if (cpus or 1) < 2:
        return False
    if dist is not None and getattr(dist, "active", False):
        return False
    device = getattr(model, "device", "cpu")
    return str(device) == "cpu"


class Claim:
    """Work two processes of one fork may each do, done by the first to ask: made before the
    fork, ``take()`` is True in exactly one process (each asks once: it closes that
    process's end). The child asks with ``take_when_open()``, which first waits until the
    parent ``open``s the claim (when the child's work would no longer slow its own) or
    takes it. ``close()`` gives up without asking (the parent on a failure)."""

    _TOKEN, _OPEN = b"c", b"o"

    def __init__(self) -> None:
        read, write = os.pipe()
        try:
            os.write(write, self._TOKEN)
        finally:
            os.close(write)  # a read after the token is taken sees EOF, never blocks
        self._read: int | None = read
        self._gate: tuple[int, int | None] | None = os.pipe()  # (read, write)

    def take(self) -> bool:
        """Whether this process got the work (the token was still in the pipe); the other
        process's wait (``take_when_open``) ends."""
        if self._read is None:
            return False
        try:
            return os.read(self._read, 1) == self._TOKEN
        finally:
            self.close()

    def open(self) -> None:
        """Let the other process's ``take_when_open`` ask (the parent, once)."""
        if self._gate is not None and self._gate[1] is not None:
            gate, opening = self._gate
            self._gate = gate, None
            try:
                os.write(opening, self._OPEN)  # one byte: never blocks
            finally:
                os.close(opening)

    def take_when_open(self) -> bool:
        """``take()`` once the parent opens the claim, takes it or ends (the child)."""
        if self._gate is not None:
            gate, opening = self._gate
            if opening is not None:
                os.close(opening)  # the parent's end, inherited
            self._gate = gate, None
            os.read(gate, 1)  # the byte, or EOF
        return self.take()

    def close(self) -> None:
        """Close this process's ends (the claim left to the other process, opened for it)."""
        self.open()
        if self._gate is not None:
            os.close(self._gate[0])
            self._gate = None
        if self._read is not None:
            os.close(self._read)
            self._read = None


class SideJob:
    """``work()`` run in a forked child (or, when ``forked`` is False, on ``result()``);
    ``claim``, one the work may take (``Claim``), is closed here by ``cancel``."""

    def __init__(self, name: str, work: Callable[[], Any], forked: bool,
                 claim: Claim | None = None) -> None:
        self.name, self.work, self.claim = name, work, claim
        self.process = self.pipe = None
        self._done = False
        self._value: Any = None
        if forked:
            context = multiprocessing.get_context("fork")
            receive, send = context.Pipe(duplex=False)
            self.process = context.Process(target=_child, args=(work, send, receive, os.getpid()),
                                           daemon=True, name=f"attnlens-{name}")
            for stream in (sys.stdout, sys.stderr):  # the child flushes what it inherits
                stream.flush()
            self.pipe = receive
            try:
                with signals_held():  # a Ctrl-C during the fork is raised after it, not lost
                    self.process.start()
            except BaseException:
                self.cancel()
                raise
            finally:
                send.close()  # the child's end: the parent sees EOF if the child dies

    def result(self) -> Any:
        """``work()``'s value (the child's, waiting for it); re-raises its failure."""
        if self._done:
            return self._value
        if self.process is None:
            self._value, self._done = self.work(), True
            return self._value
        with stopwatch.phase(WAIT_PREFIX + self.name):
            try:  # plain pickle: no storage shared through file descriptors (torch's reducers)
                kind, payload, phases = pickle.loads(self.pipe.recv_bytes())
            except EOFError:
                kind, payload, phases = "died", None, {}
            finally:
                self.pipe.close()
                self.process.join()
        for phase, seconds in phases.items():
            stopwatch.add(SIDE_PREFIX + phase, seconds)
        if kind == "died":
            raise RuntimeError(f"the {self.name} worker process ended without a result "
                               f"(exit code {self.process.exitcode}).")
        if kind == "error":
            raise payload
        self._value, self._done = payload, True
        return payload

    def cancel(self) -> None:
        """End the child if it still runs (a failed report does not wait for it).

        SIGKILL, not SIGTERM: a child forked while signals were held (``signals_held``) runs
        the parent's deferring handler until it resets its own, and would hold a SIGTERM
        sent then for ever; it writes no file, so nothing is left half done."""
        if self.pipe is not None:
            self.pipe.close()
        if self.claim is not None:
            self.claim.close()
        if self.process is not None and self.process.is_alive():
            self.process.kill()
            self.process.join()


def side_job(name: str, work: Callable[[], Any], forked: bool,
             claim: Claim | None = None) -> SideJob:
    """Start ``work`` in a forked child when ``forked`` (``side_workers_allowed``); the job's
    ``cancel`` closes ``claim``."""
    return SideJob(name, work, forked, claim)


def _child(work: Callable[[], Any], send, receive, parent: int) -> None:
    import torch

    signal.signal(signal.SIGINT, signal.SIG_DFL)  # the parent reports an interruption
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # A parent killed outright (SIGKILL, the OOM killer) runs no clean-up: the child ends
    # with it instead of computing on and then blocking for ever on a pipe no one reads.
    receive.close()  # the parent's end, inherited: with it open a write never sees EPIPE
    _end_with_parent(parent)
    torch.set_num_threads(1)
    stopwatch.PHASES.clear()  # the parent's phases so far are the parent's
    try:
        message = ("ok", work(), stopwatch.take())
    except BaseException as exc:  # handed to the parent, which raises it
        message = ("error", _picklable(exc), stopwatch.take())
    try:
        send.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))
    finally:
        send.close()


def _end_with_parent(parent: int) -> None:
    """Ask Linux to send this process SIGKILL when its parent ends (``PR_SET_PDEATHSIG``);
    exit now if the parent has already gone."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # no prctl: the closed read end still ends the child at its write
    if os.getppid() != parent:
        os._exit(1)


def _picklable(exc: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        text = "".join(traceback.format_exception(exc))
        return RuntimeError(f"a side worker failed: {text}")
