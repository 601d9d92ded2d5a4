# SPDX-License-Identifier: MIT
"""Print the files a Python program needs outside the repository: run the
binding's test suite here (memfd backend), then list every imported
module's file and every shared library those modules load (from ldd), one
absolute path per line.  tests/lib/python-guest.sh packs exactly these
into the guest, which has no Python of its own."""
import os
import subprocess
import sys
import unittest

here = os.path.dirname(os.path.abspath(__file__))
repo = os.path.dirname(os.path.dirname(here))
suite = unittest.defaultTestLoader.discover(
    os.path.join(repo, "lib", "python", "tests"))
with open(os.devnull, "w") as null:
    result = unittest.TextTestRunner(stream=null).run(suite)
if not result.wasSuccessful():
    sys.exit("python_closure: the binding's tests fail on the host")

files = {os.path.realpath(sys.executable)}
for mod in list(sys.modules.values()):
    f = getattr(mod, "__file__", None)
    if f and os.path.isabs(f) and not os.path.realpath(f).startswith(repo):
        files.add(f)
libs = set()
for f in files:
    if f.endswith(".so") or f == os.path.realpath(sys.executable):
        out = subprocess.run(["ldd", f], capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if "=>" in parts and len(parts) > parts.index("=>") + 1:
                p = parts[parts.index("=>") + 1]
                if p.startswith("/"):
                    libs.add(p)
            elif parts and parts[0].startswith("/"):
                libs.add(parts[0])
for f in sorted(files | libs):
    print(f)
