"""Do two builds of a C kernel hold the same instructions, function by function?

A check for changes to a kernel's source that should not change its code (a shared header,
moved boilerplate): each function of the two shared libraries (``objdump -d``, GNU binutils)
is compared instruction by instruction, with what moves when other code moves left out
(addresses, jump targets, RIP-relative offsets, the address in a call to a target-clones
resolver's PLT entry ``*ABS*+0x...@plt``), and the PLT's linker stubs (``@plt``) are not
compared (a new imported function shifts them). The target clones are functions of their own
(``fold_pairs.arch_x86_64_v4``, ``.arch_x86_64_v3``, ``.default``): where a clone is the same,
it computes the same bits as before.

    python benchmarks/same_instructions.py BEFORE.so AFTER.so
    # e.g. a copy of the installed build taken before the change, against the rebuilt one:
    python benchmarks/same_instructions.py /tmp/before/_words_kernel.*.so \
        attnlens/data/_words_kernel.*.so

Prints one line per function (same, differs with both instruction counts, or only in one);
exit status 0 when every function is the same, 1 otherwise.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

LABEL = re.compile(r"^<(.+)>:$")
MOVABLE = [(re.compile(r"\b[0-9a-f]+ <"), "<"),  # a jump or call target's address
           (re.compile(r"\*ABS\*\+0x[0-9a-f]+@plt"), "*ABS*@plt"),  # a resolver's PLT entry
           (re.compile(r"<[^>]*\+0x[0-9a-f]+>"), "<label>"),  # a place inside a function
           (re.compile(r"-?0x[0-9a-f]+\(%rip\)"), "X(%rip)")]  # data, relative to the code


def functions(library: str) -> dict[str, list[str]]:
    """Each function of ``library``: its instructions, what moves with other code left out."""
    listing = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "--no-addresses",
                              library], check=True, capture_output=True, text=True).stdout
    found: dict[str, list[str]] = {}
    name = None
    for line in map(str.strip, listing.splitlines()):
        label = LABEL.match(line)
        if label:
            name = None if label.group(1).endswith("@plt") else label.group(1)
            if name is not None:
                found[name] = []
        elif name is not None and line:
            for pattern, fixed in MOVABLE:
                line = pattern.sub(fixed, line)
            found[name].append(line)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    args = parser.parse_args()
    before, after = functions(args.before), functions(args.after)
    same = True
    for name in sorted(before.keys() | after.keys()):
        if name not in before or name not in after:
            state = "only in " + ("after" if name in after else "before")
        elif before[name] == after[name]:
            state = "same"
        else:
            state = f"differs ({len(before[name])} vs {len(after[name])} instructions)"
        same = same and state == "same"
        print(f"{name}: {state}")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
