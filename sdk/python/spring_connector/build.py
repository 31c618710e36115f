"""``python -m spring_connector.build APP.py [-o OUT.wasm] [--wit connector.wit]``

Builds a Python connector into a ``spring:connector@0.3.0`` component:

1. imports APP in this Python (which has pydantic) and generates its manifest, JSON
   Schemas included;
2. writes an entry module that freezes that manifest, imports APP and exports the world;
3. runs ``componentize-py`` on it, against a world that is ``connector`` plus
   ``wasi:http/outgoing-handler`` (so :mod:`spring_connector.http` can reach the host's
   policed outbound HTTP). componentize-py pre-initialises the module: the imports and
   declarations run at build time, not on every call.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import spring_connector

PACKAGE_DIR = Path(spring_connector.__file__).resolve().parent

WORLD = """package spring:connector@0.3.0;

/// `connector` plus outbound HTTP for `spring_connector.http`.
world connector-python {
    include connector;
    import wasi:http/outgoing-handler@0.2.12;
}
"""


def find_wit(given: str | None) -> Path:
    candidates = [Path(given)] if given else [
        PACKAGE_DIR / "wit" / "connector.wit",
        PACKAGE_DIR.parent.parent.parent / "wit" / "connector.wit",
    ]
    for path in candidates:
        if path.is_file():
            return path
    sys.exit("error: cannot find connector.wit: pass --wit PATH")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m spring_connector.build")
    parser.add_argument("app", help="the module declaring the Connector")
    parser.add_argument("-o", "--out", help="the component to write [default: APP.wasm]")
    parser.add_argument("--wit", help="connector.wit of the world to build against")
    args = parser.parse_args(argv)

    app = Path(args.app).resolve()
    if not app.is_file():
        sys.exit(f"error: {app} does not exist")
    out = Path(args.out).resolve() if args.out else app.with_suffix(".wasm")
    wit = find_wit(args.wit)

    # 1. The manifest, from the module as this Python imports it.
    sys.path.insert(0, str(app.parent))
    spec = importlib.util.spec_from_file_location(app.stem, app)
    if spec is None or spec.loader is None:
        sys.exit(f"error: cannot import {app}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[app.stem] = module
    spec.loader.exec_module(module)
    if len(spring_connector._CONNECTORS) != 1:
        sys.exit(f"error: {app} must declare exactly one Connector, not {len(spring_connector._CONNECTORS)}")
    manifest = spring_connector._CONNECTORS[0].manifest()

    with tempfile.TemporaryDirectory(prefix="spring-connector-") as work_dir:
        work = Path(work_dir)
        # 2. The entry module.
        (work / "spring_connector_frozen.py").write_text(f"MANIFEST = {json.dumps(manifest)!r}\n")
        (work / "spring_connector_entry.py").write_text(
            "import json\n"
            "import spring_connector\n"
            "import spring_connector_frozen\n"
            "spring_connector._freeze(json.loads(spring_connector_frozen.MANIFEST))\n"
            f"import {app.stem}\n"
            "from spring_connector._world import WitWorld, warm_up\n"
            "spring_connector._prepare()\n"
            "warm_up()\n"
        )
        # 3. The world, with the WASI packages it includes, and componentize-py.
        wit_dir = work / "wit"
        (wit_dir / "deps").mkdir(parents=True)
        shutil.copy(wit, wit_dir / "connector.wit")
        (wit_dir / "python.wit").write_text(WORLD)
        for dep in (PACKAGE_DIR / "wasi-wit").glob("*.wit"):
            (wit_dir / "deps" / dep.stem).mkdir()
            shutil.copy(dep, wit_dir / "deps" / dep.stem / dep.name)
        componentize = shutil.which("componentize-py", path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
        if componentize is None:
            sys.exit("error: componentize-py is not installed: pip install componentize-py==0.25.1")
        started = time.monotonic()
        command = [
            componentize,
            "-d", str(wit_dir),
            "-w", "connector-python",
            "componentize", "spring_connector_entry",
            "-p", str(work),
            "-p", str(PACKAGE_DIR.parent),
            "-p", str(app.parent),
            "-o", str(out),
        ]
        done = subprocess.run(command, cwd=work)
        if done.returncode != 0:
            sys.exit(f"error: componentize-py failed (exit {done.returncode})")
    size = out.stat().st_size / 1048576
    print(f"built {out} ({size:.1f} MiB) in {time.monotonic() - started:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
