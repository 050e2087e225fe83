"""The mode a new file gets, for writers that create it under a temporary name first.

`tempfile.mkstemp` makes 0600 files; renamed into place they would be private whatever the user asked
for, and a fixed 0644 would ignore a `umask 077` set to keep reports and bundles (host names, serials)
private. A plain `open(path, "w")` gives 0666 less the umask: so does this. A leaf module.
"""

from __future__ import annotations

import os


def new_file_mode() -> int:
    # the umask can only be read by setting it; a CLI process has one thread doing this
    current = os.umask(0o022)
    os.umask(current)
    return 0o666 & ~current
