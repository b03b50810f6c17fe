"""A warm pytest for mutation runs: torch is imported once, each mutant's run is a fork.

Starting pytest costs 2-4 s on these machines, nearly all of it importing torch, NumPy,
SciPy and matplotlib; a mutant's tests often take less. `serve` imports those libraries (never
`lesson` or `broken_models`, so every run imports the mutated module from disk), then forks one
child per request, which runs `pytest.main` in its own session and is killed with everything
it started when its time is up. `run` is the test command Cosmic Ray calls: it hands its
arguments to the server and exits with the tests' status.

    python benchmarks/mutation_forkserver.py serve SOCKET
    python benchmarks/mutation_forkserver.py run SOCKET TIMEOUT -- PYTEST_ARGS...
"""
from __future__ import annotations

import json
import os
import signal
import socket
import sys
import tempfile
import time

#: imported once by the server; what the course's modules import at their top
WARM = ("torch", "numpy", "scipy.spatial", "matplotlib", "matplotlib.pyplot", "sklearn",
        "pytest", "threadpoolctl", "tqdm")


def _child(request: dict, out_path: str) -> None:
    """In the fork: run pytest as `python -m pytest ARGS` would in `cwd`, then exit."""
    try:
        os.setsid()
        fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.chdir(request["cwd"])
        sys.path.insert(0, request["cwd"])
        import pytest

        code = pytest.main(request["args"])
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(code))
    except BaseException:   # noqa: BLE001 (the fork must never return into the server)
        import traceback
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(3)


def _run(request: dict) -> tuple[int, str]:
    with tempfile.NamedTemporaryFile(prefix="mutant-", suffix=".out", delete=False) as f:
        out_path = f.name
    pid = os.fork()
    if pid == 0:
        _child(request, out_path)
    deadline = time.monotonic() + float(request["timeout"])
    status = None
    while status is None:
        done, raw = os.waitpid(pid, os.WNOHANG)
        if done:
            status = os.waitstatus_to_exitcode(raw)
        elif time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            status = -9
        else:
            time.sleep(0.02)
    try:                    # what a test left running in the session goes too
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    with open(out_path, errors="replace") as f:
        output = f.read()[-20000:]
    os.unlink(out_path)
    return status, output


def serve(path: str) -> None:
    import importlib

    for name in WARM:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    assert not any(m.split(".")[0] in ("lesson", "broken_models") for m in sys.modules)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    print("ready", flush=True)
    while True:
        conn, _ = server.accept()
        with conn:
            request = json.loads(_receive(conn))
            if request.get("stop"):
                return
            status, output = _run(request)
            conn.sendall(json.dumps({"status": status, "output": output}).encode())


def _receive(conn: socket.socket) -> bytes:
    chunks = []
    while chunk := conn.recv(1 << 16):
        chunks.append(chunk)
        if chunk.endswith(b"\n"):
            break
    return b"".join(chunks)


def request(path: str, message: dict) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        conn.sendall(json.dumps(message).encode() + b"\n")
        conn.shutdown(socket.SHUT_WR)
        reply = b"".join(iter(lambda: conn.recv(1 << 16), b""))
    return json.loads(reply) if reply else {}


def main(argv: list[str]) -> int:
    if argv[:1] == ["serve"]:
        serve(argv[1])
        return 0
    if argv[:1] == ["run"]:
        path, timeout, args = argv[1], argv[2], argv[argv.index("--") + 1:]
        reply = request(path, {"cwd": os.getcwd(), "args": args, "timeout": timeout})
        sys.stdout.write(reply.get("output", ""))
        return 0 if reply.get("status") == 0 else 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
