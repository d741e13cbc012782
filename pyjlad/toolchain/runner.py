"""Running the toolchain's programs: ``opt`` with the Enzyme plugin, and ``llvm-link``.

Enzyme always runs in an ``opt`` subprocess: a crash or assertion inside
Enzyme becomes an :class:`~pyjlad.errors.EnzymeError` whose message carries
Enzyme's key diagnostic lines, never a dead Python process.
"""

from __future__ import annotations

import re
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .. import config
from ..errors import EnzymeError, InvalidObject, ToolchainError, ToolchainSettingError
from ..objcheck import check_llvm_module
from .versions import ENZYME_VERSION, file_sha256, opt_version

__all__ = ["Toolchain"]

_SELF_TEST_IR = """
define double @square(double %x) {
  %m = fmul double %x, %x
  ret double %m
}
declare double @__enzyme_autodiff(...)
define double @dsquare(double %x) {
  %r = call double (...) @__enzyme_autodiff(ptr @square, double %x)
  ret double %r
}
"""


@dataclass(frozen=True)
class Toolchain:
    """A located Enzyme toolchain.

    Attributes
    ----------
    opt : Path
        The LLVM 15 ``opt`` executable.
    plugin : Path
        ``LLVMEnzyme-15.so``, loadable by ``opt``.
    """

    opt: Path
    plugin: Path

    @property
    def identity(self) -> str:
        """A string that changes whenever the toolchain's behaviour may change.

        It names the SHA-256 of the plugin's bytes as they are now (hashed once
        per process and file version), never the stamp written at install time:
        a plugin replaced or modified since cannot reuse cached gradients.
        """
        return f"opt={self.opt_version()};enzyme={ENZYME_VERSION};plugin={file_sha256(self.plugin)}"

    def opt_version(self) -> str:
        """The ``opt --version`` line naming the LLVM version."""
        return opt_version(self.opt)

    def link(self, modules: list[str], *, what: str = "module", text: bool = False) -> bytes:
        """Link IR modules with ``llvm-link`` (LLVM 15, beside ``opt``); return bitcode (``text``: IR text)."""
        linker = self.opt.with_name(self.opt.name.replace("opt", "llvm-link"))
        with tempfile.TemporaryDirectory(prefix="pyjlad-link-") as tmp:
            paths = []
            for k, module in enumerate(modules):
                path = Path(tmp) / f"m{k}.ll"
                path.write_text(module)
                paths.append(str(path))
            proc = subprocess.run([str(linker), *paths, *(["-S"] if text else []), "-o", "-"],
                                  capture_output=True, timeout=config.opt_timeout_s())
        if proc.returncode != 0:
            stderr = proc.stderr.decode(errors="replace")
            raise EnzymeError(f"llvm-link failed while linking {what}:\n{stderr[-2000:]}", diagnostics=stderr)
        return proc.stdout

    def run(self, ir: str | bytes, passes: str, *, what: str = "module", options: tuple[str, ...] = ()) -> bytes:
        """Run ``opt`` with the Enzyme plugin over ``ir``; return the bitcode.

        Raises
        ------
        EnzymeError
            If ``opt`` fails, crashes or times out; the message carries
            Enzyme's diagnostics.
        """
        cmd = [
            str(self.opt),
            f"--load-pass-plugin={self.plugin}",
            f"-passes={passes}",
            *options,
            "-o", "-",
            "-",
        ]
        timeout, memory = config.opt_timeout_s(), config.opt_memory_bytes()
        data = ir if isinstance(ir, bytes) else ir.encode()
        try:
            with subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
                _limit_memory(proc.pid, memory)
                try:
                    stdout, stderr_bytes = proc.communicate(data, timeout=timeout)
                except subprocess.TimeoutExpired as exc:
                    proc.kill()
                    proc.communicate()
                    raise EnzymeError(
                        f"Enzyme did not finish differentiating {what} within {timeout:.0f} s "
                        "(raise PYJLAD_OPT_TIMEOUT to wait longer)"
                    ) from exc
        except OSError as exc:  # not a program (ENOEXEC), not permitted, gone since it was located
            raise _cannot_run(self.opt, exc) from exc
        stderr = stderr_bytes.decode(errors="replace")
        if proc.returncode != 0:
            raise EnzymeError(_failure_message(proc.returncode, stderr, what, memory), diagnostics=stderr)
        return stdout

    def run_text(self, ir: str, passes: str, *, what: str, defines: str) -> str:
        """``opt``'s IR text for ``passes`` over ``ir`` (no differentiation: a step before Enzyme), checked before
        it is used: a module LLVM parses that still defines ``@<defines>``; ``opt`` is run once more if not.

        An ``opt`` that reports success with its output cut short could otherwise hand Enzyme a module that parses
        but lacks the function: a build that succeeds and a call that crashes. (Enzyme's own output is checked by
        the disk cache, :func:`pyjlad.cache.get_or_build`.)

        Raises
        ------
        EnzymeError
            If ``opt`` fails, or both of its outputs fail the check.
        """
        problem = ""
        for _ in range(2):
            out = self.run(ir, passes, what=what, options=("-S",))
            try:
                check_llvm_module(out)
            except InvalidObject as exc:
                problem = str(exc)
                continue
            text = out.decode()
            if any(line.startswith("define ") and f"@{defines}(" in line for line in text.splitlines()):
                return text
            problem = f"it does not define @{defines}"
        raise EnzymeError(f"opt reported success twice but its output for {what} is not a valid LLVM module "
                          f"({problem}); the toolchain is broken: reinstall it with python -m pyjlad toolchain "
                          "install --force", diagnostics=problem)

    def self_test(self) -> None:
        """Differentiate ``x*x`` and check the derivative is ``2x``.

        Raises
        ------
        ToolchainError
            If the plugin cannot be loaded or gives a wrong derivative.
        """
        try:
            bitcode = self.run(_SELF_TEST_IR, "enzyme,default<O2>", what="the x*x self-test")
        except EnzymeError as exc:
            raise ToolchainError(f"the Enzyme toolchain failed its self-test: {exc}") from exc
        try:
            text = subprocess.run(
                [str(self.opt), "-S", "-o", "-", "-"], input=bitcode, capture_output=True,
                check=True, timeout=60,
            ).stdout.decode()
        except (OSError, subprocess.SubprocessError) as exc:
            raise ToolchainError(f"cannot read back the self-test's output: {exc}") from exc
        body = text.split("@dsquare", 1)[-1]
        if "fmul" not in body or "2.000000e+00" not in body:
            raise ToolchainError("the Enzyme self-test did not produce d(x*x)/dx = 2x:\n" + body[:500])


_KEY_LINE = re.compile(
    r"^error:|Assertion|Illegal|Enzyme:|cannot|Cannot|unknown function|LLVM ERROR|not handled|"
    r"Unhandled|Stack dump|Segmentation|Aborted"
)


def _limit_memory(pid: int, limit: int) -> None:
    """Cap the address space of process ``pid`` (``opt``, just started) at ``limit`` bytes (``0``: no cap). Set
    from outside, not in the child before ``exec`` (``preexec_fn`` is unsafe in a process with threads); the
    child has allocated next to nothing yet."""
    if not limit:
        return
    try:
        import resource

        resource.prlimit(pid, resource.RLIMIT_AS, (limit, limit))
    except (ImportError, OSError, ValueError):  # no prlimit here, or the process is gone already
        pass


#: The advice for an Enzyme run that filled its memory.
_GROWS = ("Its derivative of this function grows without bound in Enzyme v0.0.289; smaller pieces (a helper "
          "differentiated on its own, fewer matrix products per loop step) may fit.")


def _failure_message(returncode: int, stderr: str, what: str, memory: int) -> str:
    """The message of an ``opt`` run that ended with ``returncode`` (negative: killed by that signal): what failed,
    first where memory ran out, under ``memory`` bytes (``PYJLAD_OPT_MEMORY``) or before it.

    A run stopped at its limit says so on stderr. One killed with ``SIGKILL`` (which pyjlad sends only at its time
    limit, reported before this) was, on Linux, the kernel's out-of-memory killer's: the machine's memory ran out
    first, other programs taking part of it (a Kalman recursion of 10 steps, built beside a test run, failed so
    with "crashed with signal 9").

    >>> _failure_message(-9, "", "f", 2**31).splitlines()[0][:114]
    'Enzyme ran out of memory differentiating f: the system killed it (signal 9) before it reached its limit of 2.0 GiB'
    >>> _failure_message(1, "LLVM ERROR: out of memory", "f", 2**31).splitlines()[0][:88]
    'Enzyme ran out of memory differentiating f: it may take 2.0 GiB (PYJLAD_OPT_MEMORY). Its'
    >>> _failure_message(1, "Enzyme: cannot handle", "f", 2**31).splitlines()[0]
    'Enzyme failed (exit status 1) while differentiating f:'
    """
    message = _describe_failure(returncode, stderr, what)
    limit = f"{memory / 2**30:.1f} GiB"
    if returncode == -signal.SIGKILL:
        stopped = (f"the system killed it (signal 9) before it reached its limit of {limit} (PYJLAD_OPT_MEMORY: a lower "
                   "one stops it sooner)." if memory else "the system killed it (signal 9).")
        return f"Enzyme ran out of memory differentiating {what}: {stopped} {_GROWS}\n{message}"
    if memory and any(sign in stderr for sign in ("out of memory", "bad_alloc", "terminate called")):
        return f"Enzyme ran out of memory differentiating {what}: it may take {limit} (PYJLAD_OPT_MEMORY). {_GROWS}\n{message}"
    return message


def _describe_failure(returncode: int, stderr: str, what: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    key = [
        ln[:300] for ln in lines
        if _KEY_LINE.search(ln) and not ln.startswith(("@", "define ", "declare "))
    ]
    summary = "\n".join((key or lines[-5:])[:12])
    if returncode < 0:
        how = f"crashed with signal {-returncode}"
    else:
        how = f"failed (exit status {returncode})"
    return f"Enzyme {how} while differentiating {what}:\n{summary}"


def _cannot_run(opt: Path, exc: OSError) -> ToolchainError:
    """The error for an ``opt`` the system would not start, naming ``PYJLAD_OPT`` when it chose it."""
    override = config.opt_override()
    if override:
        return ToolchainSettingError(
            f"PYJLAD_OPT={override!r} cannot be run ({exc.strerror}): point it at LLVM 15's opt, "
            "or unset it to use opt-15 from PATH (the default)")
    return ToolchainError(f"LLVM 15's opt at {opt} cannot be run ({exc.strerror}): reinstall it "
                          "(Debian package llvm-15), or set PYJLAD_OPT to a working opt-15")
