"""Install, start, wait for and stop a local Kinesis server on 127.0.0.1.

Two implementations from npm: kinesis-local (the most faithful: resharding lineage, ChildShards,
regions and accounts) is the default; kinesalite (fast, strict) is the second. The servers are
installed with npm from the pinned package.json beside this file into a cache folder, so the
project's own files are all a fresh machine needs. Only the process this object started is stopped.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from ..aws.admin import answers
from ..switches import NPM_DIR

KINDS = ("kinesis-local", "kinesalite")
_HERE = Path(__file__).resolve().parent


def install_dir() -> Path:
    return Path(NPM_DIR.value() or Path.home() / ".cache" / "pyspark-kinesis" / "npm")


def ensure_installed() -> Path:
    """npm-install the pinned servers once; returns the folder holding node_modules."""
    target = install_dir()
    marker = target / "node_modules" / ".pyspark-kinesis-installed"
    wanted = (_HERE / "package.json").read_text()
    if marker.exists() and marker.read_text() == wanted:
        return target
    if shutil.which("npm") is None:
        raise RuntimeError(
            "npm is needed to install the local Kinesis servers; install Node.js 18+ with npm."
        )
    target.mkdir(parents=True, exist_ok=True)
    (target / "package.json").write_text(wanted)
    subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=target,
        check=True,
        timeout=600,
    )
    marker.write_text(wanted)
    return target


def port_free(port: int) -> bool:
    """Whether a server could listen on 127.0.0.1:`port` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# kinesis-local binds its plain and TLS ports on every interface (its host is fixed at 0.0.0.0), and it
# accepts any credentials: a local test server must not be reachable from the network. Node's listen()
# is given 127.0.0.1 wherever it was asked for every interface (no host, 0.0.0.0 or ::).
LOOPBACK_ONLY = (
    "const net = require('net'); const listen = net.Server.prototype.listen;"
    "net.Server.prototype.listen = function (...args) {"
    " if (typeof args[0] === 'number' || (typeof args[0] === 'string' && /^[0-9]+$/.test(args[0]))) {"
    "  if (args.length === 1 || typeof args[1] === 'function') { args.splice(1, 0, '127.0.0.1'); }"
    "  else if (args[1] === '0.0.0.0' || args[1] === '::') { args[1] = '127.0.0.1'; } }"
    " return listen.apply(this, args); };"
)


class LocalKinesis:
    """A local Kinesis server process. Use as a context manager, or call start() and stop()."""

    def __init__(
        self,
        kind: str = "kinesis-local",
        port: int | None = None,
        persist_dir: str | None = None,
        env: dict[str, str] | None = None,
        tls: tuple[str, str] | None = None,
        shard_limit: int = 1000,
    ) -> None:
        """`tls`: (private key, certificate) PEM files with which kinesalite serves HTTPS instead of HTTP,
        as Kinesis does (the benchmarks' TLS figures; a client trusts the certificate by AWS_CA_BUNDLE).
        `shard_limit`: the account's shard limit the server enforces (the wide-stream benchmark's streams
        pass the default)."""
        if kind not in KINDS:
            raise ValueError(f"unknown local Kinesis kind {kind!r}; use one of {', '.join(KINDS)}")
        if tls is not None and kind != "kinesalite":
            raise ValueError(f"a local {kind} serves TLS with its own certificate only; use kinesalite")
        self.kind = kind
        self.tls = tls
        self.shard_limit = shard_limit
        self.port = port or free_port()
        self.persist_dir = persist_dir
        self.extra_env = env or {}
        self.process: subprocess.Popen[bytes] | None = None
        self._log = tempfile.NamedTemporaryFile(prefix=f"{kind}-", suffix=".log", delete=False)  # noqa: SIM115

    @property
    def endpoint(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> str:
        return self._log.name

    def _command(self, root: Path) -> tuple[list[str], dict[str, str]]:
        env = dict(os.environ)
        modules = root / "node_modules"
        if self.kind == "kinesis-local":
            package = modules / "kinesis-local"
            env.update(
                {
                    "KINESIS_MOCK_PLAIN_PORT": str(self.port),
                    "KINESIS_MOCK_TLS_PORT": str(free_port()),
                    "KINESIS_MOCK_CERT_PATH": str(package / "server.json"),
                    "CREATE_STREAM_DURATION": "0ms",
                    "DELETE_STREAM_DURATION": "0ms",
                    "SPLIT_SHARD_DURATION": "0ms",
                    "MERGE_SHARDS_DURATION": "0ms",
                    "UPDATE_SHARD_COUNT_DURATION": "0ms",
                    "SHARD_LIMIT": str(self.shard_limit),
                    "LOG_LEVEL": "WARN",
                }
            )
            if self.persist_dir:
                env.update(
                    {
                        "SHOULD_PERSIST_DATA": "true",
                        "PERSIST_PATH": self.persist_dir,
                        "PERSIST_INTERVAL": "1s",
                    }
                )
            env.update(self.extra_env)
            return ["node", "-e", LOOPBACK_ONLY + f"require({str(package / 'main.js')!r});"], env
        # kinesalite throws on a request its client aborted mid-body (an executor killed while it sent a
        # call): uncaught, that ends the whole server. Such an error ends that request only, as it would
        # on Kinesis; any other uncaught error still ends the server.
        script = (
            "process.on('uncaughtException', function (err) { if (err && err.code === 'ECONNRESET') {"
            " console.error('kinesalite: a client aborted a request (' + err.message + ')'); return; }"
            " console.error(err); process.exit(1); });"
            f"require('kinesalite')({{shardLimit: {self.shard_limit}, createStreamMs: 0, deleteStreamMs: 0, updateStreamMs: 0"
            + (f", path: {self.persist_dir!r}" if self.persist_dir else "")
            + (
                f", ssl: true, key: require('fs').readFileSync({self.tls[0]!r}),"
                f" cert: require('fs').readFileSync({self.tls[1]!r})"
                if self.tls
                else ""
            )
            + f"}}).listen({self.port}, '127.0.0.1', function (err) {{ if (err) throw err; }})"
        )
        env["NODE_PATH"] = str(modules)
        env.update(self.extra_env)
        return ["node", "-e", script], env

    def start(self, timeout_s: float = 60.0) -> LocalKinesis:
        root = ensure_installed()
        command, env = self._command(root)
        self.process = subprocess.Popen(
            command, cwd=root, env=env, stdout=self._log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"{self.kind} exited with code {self.process.returncode}; see {self.log_path}"
                )
            if answers(self.endpoint):
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(
            f"{self.kind} did not answer on {self.endpoint} within {timeout_s:.0f} s; see {self.log_path}"
        )

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=2)  # kinesis-local ignores SIGTERM
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None

    def __enter__(self) -> LocalKinesis:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
