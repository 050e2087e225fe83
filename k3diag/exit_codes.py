"""Exit codes every k3diag command uses, so CI gates and fleet tools can rely on them.

They follow the Nagios / Meta GCM convention that node-problem-detector, NHC and most fleet health checkers
read (0 ok, 1 warning, 2 critical, 3 unknown), plus BSD sysexits' EX_USAGE for a command line that is wrong and EX_IOERR for output that could not be written.
Imported by the CLI and the analyzers alike; it imports nothing.
"""

from __future__ import annotations

EXIT_OK = 0
"""Nothing warns (or `--fail-on` said to ignore what does)."""
EXIT_WARN = 1
"""At least one warning, and `--fail-on warn` (the default)."""
EXIT_FAIL = 2
"""At least one failure: a fault or misconfiguration that costs performance or correctness."""
EXIT_UNKNOWN = 3
"""The machine cannot be judged: nothing analyzable, or no GPU where one is expected."""
EXIT_USAGE = 64
"""The command line is wrong: a missing path, a bad option value (sysexits.h EX_USAGE)."""
EXIT_IOERR = 74
"""Standard output could not be written (a full disk, an unwritable descriptor): what came out is incomplete
(sysexits.h EX_IOERR). A reader that stopped reading (`| head`) is not this: the verdict's code stays."""
