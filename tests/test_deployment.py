"""The deployment files, checked without Docker (no daemon where the tests
run; the images are not built here, docs/deployment.md says so): the
Dockerfiles copy only what exists and what ``.dockerignore`` lets through,
install the repository's own distributions with the README's ``pip`` line,
run a real command with a health check on a real route; the stop timeouts
in docs/deployment.md leave room for ``server.shutdown_grace``, and its
Kubernetes manifests probe real routes and share the signing key.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from missive.config import Config, ServerConfig
from missive.server.shutdown import CLOSE_MARGIN
from missive.testing import closed_port

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).parent.parent
DOCKERFILES = ["Dockerfile", "Dockerfile.cuda"]
DEPLOYMENT = ROOT / "docs" / "deployment.md"
#: What the images hold: the core, llamacpp with the default model, the remote drivers.
DISTRIBUTIONS = {
    "missive-server",
    "missive-llamacpp",
    "missive-openai",
    "missive-vllm",
    "missive-llamaserver",
    "missive-ollama",
}
#: Seconds ``missive serve`` may take after SIGTERM, beyond the grace (missive.server.shutdown).
AFTER_GRACE = 2 * CLOSE_MARGIN


def instructions(name: str) -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (KEYWORD, arguments), continuation
    lines joined and comments dropped, as Docker reads them."""
    found: list[tuple[str, str]] = []
    pending = ""
    for line in (ROOT / name).read_text().splitlines():
        text = line.strip()
        if not text or text.startswith("#"):
            continue  # Docker drops comment lines, also inside a continuation
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        keyword, _, rest = (pending + text).partition(" ")
        found.append((keyword.upper(), rest.strip()))
        pending = ""
    assert not pending, f"{name} ends inside a continuation"
    return found


def stages(name: str) -> list[list[tuple[str, str]]]:
    """The instructions of each stage (from its FROM), in order."""
    result: list[list[tuple[str, str]]] = []
    for keyword, rest in instructions(name):
        if keyword == "FROM":
            result.append([])
        if result:
            result[-1].append((keyword, rest))
    return result


def arg_defaults(name: str) -> dict[str, str]:
    return {
        key: shlex.split(value)[0] if value else ""
        for keyword, rest in instructions(name)
        if keyword == "ARG" and "=" in rest
        for key, _, value in [rest.partition("=")]
    }


def expand(text: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], text)


def exec_form(rest: str) -> list[str]:
    """The JSON array of a CMD (or of a HEALTHCHECK after its options)."""
    return json.loads(rest[rest.index("[") :])


def dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _pattern(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go's filepath.Match plus ``**``) as a regex."""
    regex, parts = "", pattern.strip("/").split("/")
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**":
            regex += ".*" if last else "(?:[^/]+/)*"
            continue
        regex += "".join("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c) for c in part) + (
            "" if last else "/"
        )
    return re.compile(regex + r"\Z")


def ignored(path: str) -> bool:
    """Whether the build context leaves ``path`` out (it, or a folder above
    it, matches; a later ``!pattern`` takes it back)."""
    segments = path.strip("/").split("/")
    candidates = ["/".join(segments[: i + 1]) for i in range(len(segments))]
    result = False
    for raw in dockerignore():
        keep = raw.startswith("!")
        rx = _pattern(raw.lstrip("!"))
        if any(rx.match(c) for c in candidates):
            result = not keep
    return result


def tracked(path: str) -> list[str]:
    command = ["git", "ls-files", "--", path]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()


def copies(name: str) -> list[tuple[list[str], str]]:
    """(sources, destination) of each COPY from the build context."""
    found = []
    for keyword, rest in instructions(name):
        if keyword != "COPY":
            continue
        words = shlex.split(rest)
        if any(w.startswith("--from") for w in words):
            continue
        words = [w for w in words if not w.startswith("--")]
        found.append((words[:-1], words[-1]))
    return found


def pyproject(folder: Path) -> dict[str, Any]:
    return tomllib.loads((folder / "pyproject.toml").read_text())


def app_routes() -> set[tuple[str, str]]:
    from missive.server.app import create_app

    app = create_app(Config.model_validate({"models": {"echo": {"driver": "echo"}}}))
    return {(rule.rule, method) for rule in app.url_map.iter_rules() for method in rule.methods or ()}


@pytest.mark.parametrize("name", DOCKERFILES)
def test_the_image_copies_only_what_the_context_has(name: str) -> None:
    """Every COPY source exists in the repository, and no file of it that
    the image needs (everything tracked but tests) is left out of the build
    context by .dockerignore."""
    sources = [source for sources, _ in copies(name) for source in sources]
    assert {"pyproject.toml", "README.md", "core"} <= set(sources)
    for source in sources:
        assert (ROOT / source).exists(), f"{name} copies {source}, which does not exist"
        assert not ignored(source), f".dockerignore leaves out {source}, which {name} copies"
        for path in tracked(source):
            if "/tests/" not in f"/{path}":
                assert not ignored(path), f".dockerignore leaves out {path}, which {name} copies"
    for junk in (".git/config", ".venv/bin/python", "core/missive/__pycache__/x.pyc"):
        assert ignored(junk), junk


@pytest.mark.parametrize("name", DOCKERFILES)
def test_the_pip_line_installs_the_repository_distributions(name: str) -> None:
    """The build stage's ``pip install`` names local folders the image
    copied, each a distribution of this repository (the core, llamacpp, the
    remote drivers), with extras they declare, and every sibling an extra
    requires is on the same line (plain pip needs it, README)."""
    [run] = [rest for keyword, rest in instructions(name) if keyword == "RUN" and "pip install" in rest]
    words = shlex.split(run)
    targets = [w for w in words[words.index("install") + 1 :] if not w.startswith("-")]
    copied = {
        Path(dest, Path(src).name if dest.endswith("/") else "").as_posix().removeprefix("./")
        for sources, dest in copies(name)
        for src in sources
    }
    installed: dict[str, set[str]] = {}
    required: list[tuple[str, set[str]]] = []
    for target in targets:
        folder, _, extras_text = target.partition("[")
        extras = set(filter(None, extras_text.rstrip("]").split(",")))
        folder = folder.removeprefix("./").rstrip("/") or "."
        assert folder == "." or folder in copied, f"{target}: {folder} is not copied into the image"
        meta = pyproject(ROOT / folder)["project"]
        declared = meta.get("optional-dependencies", {})
        assert extras <= set(declared), f"{target}: no such extra in {folder}/pyproject.toml"
        installed[meta["name"]] = extras
        for extra in extras:
            for requirement in declared[extra]:
                match = re.match(r"(missive-[\w-]+)(?:\[([\w,-]+)\])?==", requirement)
                if match:
                    required.append((match.group(1), set(filter(None, (match.group(2) or "").split(",")))))
    assert set(installed) == DISTRIBUTIONS
    for distribution, extras in required:
        assert distribution in installed, f"an extra needs {distribution}, which is not on the pip line"
        assert extras <= installed[distribution], f"{distribution} is installed without {extras}"


@pytest.mark.parametrize("name", DOCKERFILES)
def test_the_command_is_missive_serve_on_all_addresses(name: str) -> None:
    """CMD runs the ``missive`` script of the core distribution with its
    ``serve`` command and options that exist; the exposed port is the
    default one; the final stage runs as a user who is not root, with its
    state directory as a volume."""
    from missive.cli.main import cli

    final = stages(name)[-1]
    [cmd] = [exec_form(rest) for keyword, rest in final if keyword == "CMD"]
    assert cmd[:2] == ["missive", "serve"]
    assert pyproject(ROOT)["project"]["scripts"]["missive"] == "missive.cli.main:main"
    context = cli.commands["serve"].make_context("serve", cmd[2:])
    assert context.params["host"] == "0.0.0.0"
    assert [rest for keyword, rest in final if keyword == "EXPOSE"] == [str(ServerConfig().port)]
    [user] = [rest for keyword, rest in final if keyword == "USER"]
    assert user not in ("root", "0")
    [useradd] = [rest for keyword, rest in final if keyword == "RUN" and "useradd" in rest]
    assert re.search(rf"--home-dir (\S+) .*\b{user}$", useradd)
    home = re.search(r"--home-dir (\S+)", useradd).group(1)  # type: ignore[union-attr]
    env = " ".join(rest for keyword, rest in final if keyword == "ENV")
    assert f"MISSIVE_STATE_DIR={home}" in env
    assert [json.loads(rest) for keyword, rest in final if keyword == "VOLUME"] == [[home]]
    assert ("STOPSIGNAL", "SIGTERM") in final


def test_the_base_images() -> None:
    """The CPU image is built on python:3.12-slim; the CUDA one on
    nvidia/cuda (devel to build, runtime to run) with llama-cpp-python's
    CUDA build flag."""

    def bases(name: str) -> list[str]:
        args = arg_defaults(name)
        return [expand(rest.split()[0], args) for keyword, rest in instructions(name) if keyword == "FROM"]

    assert set(bases("Dockerfile")) == {"python:3.12-slim"}
    cuda = arg_defaults("Dockerfile.cuda")
    [build, run] = bases("Dockerfile.cuda")
    assert build.startswith("nvidia/cuda:") and "-devel-" in build
    assert run.startswith("nvidia/cuda:") and "-runtime-" in run
    assert "-DGGML_CUDA=on" in cuda["CMAKE_ARGS"]


@pytest.mark.parametrize("name", DOCKERFILES)
def test_the_healthcheck_probes_livez(name: str, echo_url: str) -> None:
    """The HEALTHCHECK command requests a GET route the app has (/livez) on
    the default port: run as it is, it succeeds against a live server and
    fails where nothing listens."""
    [health] = [rest for keyword, rest in stages(name)[-1] if keyword == "HEALTHCHECK"]
    command = exec_form(health)
    assert command[:2] == ["python", "-c"]
    match = re.search(r"http://127\.0\.0\.1:%s(/\w+)'.*'MISSIVE__SERVER__PORT', '(\d+)'", command[2])
    assert match, command[2]
    assert (match.group(1), "GET") in app_routes()
    assert int(match.group(2)) == ServerConfig().port
    probe = [sys.executable, *command[1:]]
    port = echo_url.rsplit(":", 1)[1]  # the session's live echo server
    ok = subprocess.run(probe, env={"MISSIVE__SERVER__PORT": port}, capture_output=True, timeout=30)
    assert ok.returncode == 0, ok.stderr
    with closed_port() as unused:
        nothing = subprocess.run(
            probe, env={"MISSIVE__SERVER__PORT": str(unused.port)}, capture_output=True, timeout=30
        )
    assert nothing.returncode != 0


def _code_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.DOTALL)


def test_every_stop_timeout_leaves_room_for_the_grace() -> None:
    """Each supervisor's time before SIGKILL shown in the docs (systemd's
    TimeoutStopSec, docker's --stop-timeout and -t, Compose's
    stop_grace_period) exceeds the default ``shutdown_grace`` plus what
    ``missive serve`` may take after it."""
    grace = ServerConfig().shutdown_grace
    pages = [DEPLOYMENT, ROOT / "docs" / "configuration.md", ROOT / "README.md"]
    text = "\n".join(page.read_text() for page in pages)
    patterns = [
        r"TimeoutStopSec=(\d+)",
        r"--stop-timeout (\d+)",
        r"docker stop -t (\d+)",
        r"stop_grace_period: (\d+)s",
    ]
    found = [int(n) for pattern in patterns for n in re.findall(pattern, text)]
    assert len(found) >= 5, found
    for seconds in found:
        assert seconds > grace + AFTER_GRACE, f"{seconds} s to SIGKILL < {grace} s grace + {AFTER_GRACE} s"


def test_the_kubernetes_manifests() -> None:
    """docs/deployment.md's Deployment runs several replicas of the image's
    command, probes routes the app has, gives every replica the same
    signing key from the Secret it defines, runs as the image's user, and
    its termination grace period covers preStop + shutdown_grace + the
    rest; the Service targets the container's port."""
    yaml = pytest.importorskip("yaml")
    blocks = _code_blocks(DEPLOYMENT.read_text(), "yaml")
    [manifests] = [block for block in blocks if "kind: Deployment" in block]
    docs = {doc["kind"]: doc for doc in yaml.safe_load_all(manifests)}
    assert set(docs) == {"Secret", "ConfigMap", "Deployment", "Service"}
    config = tomllib.loads(docs["ConfigMap"]["data"]["missive.toml"])
    grace = config["server"]["shutdown_grace"]
    Config.model_validate(config)
    spec = docs["Deployment"]["spec"]
    assert spec["replicas"] >= 2
    pod = spec["template"]["spec"]
    [container] = pod["containers"]
    from missive.cli.main import cli

    assert container["args"][:2] == ["missive", "serve"]
    cli.commands["serve"].make_context("serve", container["args"][2:])
    routes = app_routes()
    kinds = ("startupProbe", "livenessProbe", "readinessProbe")
    probes = {name: container[name]["httpGet"]["path"] for name in kinds}
    assert probes == {"startupProbe": "/livez", "livenessProbe": "/livez", "readinessProbe": "/readyz"}
    assert all((path, "GET") in routes for path in probes.values())
    [port] = container["ports"]
    assert port["containerPort"] == ServerConfig().port
    assert docs["Service"]["spec"]["ports"][0]["targetPort"] == port["name"]
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"]}
    secret = docs["Secret"]
    for name in ("MISSIVE__THINKING__SIGNING_KEY", "MISSIVE_API_KEY"):
        assert env[name]["name"] == secret["metadata"]["name"] and env[name]["key"] in secret["stringData"]
    [useradd] = [rest for word, rest in instructions("Dockerfile") if word == "RUN" and "useradd" in rest]
    assert f"--uid {pod['securityContext']['runAsUser']} " in useradd
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    assert pod["terminationGracePeriodSeconds"] > int(pre_stop[1]) + grace + AFTER_GRACE


def test_deployment_is_linked_from_the_readme_and_the_index() -> None:
    """README.md and docs/index.md point to docs/deployment.md."""
    assert "](docs/deployment.md)" in (ROOT / "README.md").read_text()
    assert "](deployment.md)" in (ROOT / "docs" / "index.md").read_text()
