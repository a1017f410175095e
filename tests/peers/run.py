"""Start a real LiteLLM proxy on a free local port, run a command against it, stop it.

``make test-peers`` runs ``python tests/peers/run.py --litellm .venv-peers/bin/litellm --
pytest tests/peers ...``: the proxy serves tests/peers/litellm.yaml (mock responses only,
so no provider is called) and the command gets its address in
``SALVAGELANE_TEST_LITELLM_URL``, the proxy's master key (made up for this run: LiteLLM
refuses to start without one) in ``SALVAGELANE_TEST_LITELLM_KEY`` and LiteLLM's version
in ``SALVAGELANE_TEST_LITELLM_VERSION``. The proxy is offline: the model cost map is
LiteLLM's bundled copy and telemetry is off, so it fetches nothing at start. Its output
goes to a log file, printed when it fails to become ready or the command fails.
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "litellm.yaml"
READY_SECONDS = 120.0

# What keeps LiteLLM offline and quiet at start (it fetches the model cost map and
# reports telemetry otherwise).
OFFLINE = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_TELEMETRY": "False",
    "LITELLM_DONT_SHOW_FEEDBACK_BOX": "True",
    "DISABLE_SCHEMA_UPDATE": "True",
    "NO_DOCS": "True",
    "NO_REDOC": "True",
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def litellm_version(litellm: Path) -> str:
    python = litellm.parent / "python"
    found = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return found.stdout.strip()


def wait_ready(url: str, proxy: subprocess.Popen[bytes]) -> bool:
    """Whether the proxy's readiness endpoint answered 200 before it exited or time ran out."""
    give_up = time.monotonic() + READY_SECONDS
    while time.monotonic() < give_up and proxy.poll() is None:
        try:
            with urllib.request.urlopen(f"{url}/health/readiness", timeout=5) as answer:
                if answer.status == 200:
                    return True
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    return False


def stop(proxy: subprocess.Popen[bytes]) -> None:
    proxy.terminate()
    try:
        proxy.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proxy.kill()
        proxy.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--litellm", type=Path, required=True, help="the litellm executable")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("expected a command after --")

    litellm = args.litellm.absolute()
    version = litellm_version(litellm)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    key = f"sk-{secrets.token_hex(32)}"
    # PEER_SELF_URL: litellm.yaml's relayed model calls the proxy itself, no one else.
    env = {**os.environ, **OFFLINE, "LITELLM_MASTER_KEY": key, "PEER_SELF_URL": f"{url}/v1"}
    with tempfile.TemporaryDirectory(prefix="salvagelane-peers-") as scratch:
        log_path = Path(scratch) / "litellm.log"
        print(f"test-peers: starting litellm {version} on {url} (log: {log_path})", flush=True)
        with log_path.open("wb") as log:
            proxy = subprocess.Popen(
                [
                    str(litellm),
                    "--config",
                    str(CONFIG),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--num_workers",
                    "1",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=scratch,
                env=env,
            )
            try:
                if not wait_ready(url, proxy):
                    print(f"test-peers: litellm did not become ready at {url}/health/readiness")
                    print(log_path.read_text(encoding="utf-8", errors="replace"))
                    return 1
                print(f"test-peers: litellm {version} is ready", flush=True)
                result = subprocess.run(
                    command,
                    env={
                        **os.environ,
                        "SALVAGELANE_TEST_LITELLM_URL": url,
                        "SALVAGELANE_TEST_LITELLM_KEY": key,
                        "SALVAGELANE_TEST_LITELLM_VERSION": version,
                    },
                    check=False,
                )
            finally:
                stop(proxy)
        if result.returncode != 0:
            print("test-peers: the proxy's log follows")
            print(log_path.read_text(encoding="utf-8", errors="replace"))
        return result.returncode


if __name__ == "__main__":
    sys.exit(main())
