"""``ansible-operator completion bash|zsh|fish``: the shell code that completes the command line.

The completions come from the command's own argparse parser, through argcomplete: the shell code calls
``ansible-operator`` with argcomplete's environment (``_ARGCOMPLETE`` ...), and :func:`complete_if_asked`
answers from :func:`ansible_operator.cli.build_parser` and exits, before anything else runs. Same use as
the Operator SDK binary's ``completion`` (cobra's), e.g. ``source <(ansible-operator completion bash)``.
"""

from __future__ import annotations

import argparse
import os
import sys

SHELLS = ("bash", "zsh", "fish")


def complete_if_asked(parser: argparse.ArgumentParser) -> None:
    """When the shell asks for completions, print them and exit; otherwise return at once."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    import argcomplete

    argcomplete.autocomplete(parser)


def main(args: argparse.Namespace) -> int:
    from argcomplete.shell_integration import shellcode

    sys.stdout.write(shellcode(["ansible-operator"], shell=args.shell))
    return 0
