"""Static checks of the Dockerfile and docker-compose.yml.

Docker is not available where the tests run, so these files are checked by
reading them: a small Dockerfile parser (tests/dockerfile_parsing.py), and
yaml.safe_load for the compose file.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from tests.dockerfile_parsing import (
    Instruction,
    copy_sources_and_dest,
    exec_or_shell,
    find,
    healthcheck_argv,
    healthcheck_url,
    install_index,
    merged_env,
    parse_dockerfile,
    parse_env,
)

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE_FILE = ROOT / "docker-compose.yml"
PORT = 11435


@pytest.fixture(scope="module")
def instructions() -> list[Instruction]:
    assert DOCKERFILE.is_file(), "Dockerfile is missing"
    parsed = parse_dockerfile(DOCKERFILE.read_text(encoding="utf-8"))
    assert parsed, "the Dockerfile has no instructions"
    return parsed


# --------------------------------------------------------------------------
# Parser self-checks
# --------------------------------------------------------------------------


def test_parser_joins_continuations_and_drops_comments():
    text = (
        "# syntax=docker/dockerfile:1\n"
        "FROM base\n"
        "RUN a \\\n"
        "  # a comment inside the continuation\n"
        "\n"
        "  && b\n"
        "ENV A=1 \\\n"
        '    B=""\n'
        "CMD [\"x\", \"y\"]\n"
    )
    parsed = parse_dockerfile(text)
    assert [(i.keyword, i.args) for i in parsed] == [
        ("FROM", "base"),
        ("RUN", "a && b"),
        ("ENV", 'A=1 B=""'),
        ("CMD", '["x", "y"]'),
    ]
    assert parse_env(parsed[2].args) == {"A": "1", "B": ""}
    assert exec_or_shell(parsed[3].args) == ["x", "y"]
    assert parse_env("LEGACY some value") == {"LEGACY": "some value"}


# --------------------------------------------------------------------------
# Dockerfile
# --------------------------------------------------------------------------


def test_base_image(instructions):
    froms = find(instructions, "FROM")
    assert len(froms) == 1
    assert instructions[0].keyword == "FROM" or all(
        i.keyword == "ARG" for i in instructions[: instructions.index(froms[0])]
    )
    assert froms[0].args.split()[0] == "python:3.11-slim"


def test_build_environment(instructions):
    env = merged_env(instructions)
    assert env.get("PYTHONDONTWRITEBYTECODE") == "1"
    assert env.get("PYTHONUNBUFFERED") == "1"
    assert env.get("PIP_NO_CACHE_DIR") == "1"
    # Set, and empty: tiktoken then keeps no cache copy under /tmp.
    assert "TIKTOKEN_CACHE_DIR" in env
    assert env["TIKTOKEN_CACHE_DIR"] == ""


def test_runtime_environment(instructions):
    env = merged_env(instructions)
    assert env.get("GRAPHGATE_HOST") == "0.0.0.0"
    assert env.get("GRAPHGATE_PORT") == str(PORT)
    assert env.get("GRAPHGATE_DATA_DIR") == "/data"
    # every GRAPHGATE_* variable the image sets is a setting GraphGate reads
    from proxy.core.settings import SETTINGS

    assert {k for k in env if k.startswith("GRAPHGATE_")} <= {s.env for s in SETTINGS}


def test_workdir_is_app(instructions):
    workdirs = find(instructions, "WORKDIR")
    assert workdirs, "no WORKDIR"
    assert workdirs[-1].args == "/app"


def test_copy_sources_exist_and_land_in_app(instructions):
    copies = find(instructions, "COPY") + find(instructions, "ADD")
    assert copies, "the Dockerfile copies nothing"
    copied: set[str] = set()
    for instruction in copies:
        assert instruction.keyword == "COPY", "use COPY, not ADD"
        sources, dest = copy_sources_and_dest(instruction.args)
        assert dest.startswith("./") or dest.startswith("/app"), dest
        for source in sources:
            path = (ROOT / source).resolve()
            assert ROOT == path or ROOT in path.parents, f"{source} is outside the repository"
            assert path.exists(), f"COPY source {source!r} does not exist in the repository"
            copied.add(source.rstrip("/") or ".")
    # Everything the package build and the running app need is copied.
    assert {"pyproject.toml", "README.md", "proxy", "admin", "templates"} <= copied


def test_copies_cover_what_pyproject_needs(instructions):
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    copied: set[str] = set()
    for instruction in find(instructions, "COPY"):
        copied.update(s.rstrip("/") for s in copy_sources_and_dest(instruction.args)[0])
    readme = pyproject["project"].get("readme")
    if isinstance(readme, str):
        assert readme in copied
    tool = pyproject["tool"]["setuptools"]
    mapped = tool.get("package-dir", {})
    for package in tool["packages"]:  # each package's top-level directory must be copied
        top = package.split(".")[0]
        directory = next((d for p, d in mapped.items() if package == p or package.startswith(p + ".")), top)
        assert directory.split("/")[0] in copied, package
    assert "graphgate" in pyproject["project"]["scripts"]


def test_every_package_directory_is_listed_for_installation():
    """pip install . (not editable) ships only the listed packages: a new subpackage must be added."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    listed = set(tool["packages"])
    for top in ("proxy", "admin"):
        for init in (ROOT / top).rglob("__init__.py"):
            package = ".".join(init.parent.relative_to(ROOT).parts)
            assert package in listed, f"{package} is missing from [tool.setuptools] packages"
    assert tool["package-dir"]["admin.templates"] == "templates"
    assert (ROOT / "templates" / "__init__.py").exists()  # a regular package: resources are real files


def test_install_is_regular_install_from_app(instructions):
    index = install_index(instructions)
    run = instructions[index].args
    # /app itself, quoted or not, with extras or not ("/app[postgresql]")
    found = re.search(r"\bpip\s+install\b[^&;|]*\s([\"']?)/app(?:\[([\w,-]+)\])?\1(\s|$)", run)
    assert found, run
    # the image also runs GRAPHGATE_STORE=postgresql://... (docker-compose.scale.yml): psycopg and pgvector
    assert "postgresql" in (found.group(2) or "").split(","), run
    assert not re.search(r"\s(-e|--editable)\s", run), "install must not be editable"
    # Every COPY into /app happens before the install.
    last_copy = max(i for i, ins in enumerate(instructions) if ins.keyword == "COPY")
    assert last_copy < index


def test_runs_as_non_root_after_install(instructions):
    users = [(i, ins) for i, ins in enumerate(instructions) if ins.keyword == "USER"]
    assert users, "no USER instruction: the container would run as root"
    index, last_user = users[-1]
    user = last_user.args.split(":")[0]
    assert user not in {"root", "0"}
    assert index > install_index(instructions)
    # The user is created, and owns /data.
    runs_before = " ".join(ins.args for ins in instructions[:index] if ins.keyword == "RUN")
    assert re.search(rf"\buseradd\b.*\b{re.escape(user)}\b", runs_before)
    assert re.search(rf"\bchown\b\s+\S*{re.escape(user)}\S*\s+/data\b", runs_before)


def test_data_volume(instructions):
    volumes: list[str] = []
    for instruction in find(instructions, "VOLUME"):
        args = instruction.args
        volumes += json.loads(args) if args.startswith("[") else args.split()
    assert "/data" in volumes


def test_expose(instructions):
    exposed = [p.split("/")[0] for ins in find(instructions, "EXPOSE") for p in ins.args.split()]
    assert exposed == [str(PORT)]


def test_healthcheck_uses_stdlib_on_the_readiness_endpoint(instructions):
    """The probe itself is run by tests/test_packaging.py (ready: exit 0) and tests/test_health.py
    covers the 503; here, that it needs nothing the slim image lacks."""
    argv = healthcheck_argv(instructions)
    command = " ".join(argv)
    program = argv[0] if argv[0] != "/bin/sh" else argv[2].split()[0]
    assert program in {"python", "python3"}
    assert "urllib.request" in command
    assert "curl" not in command and "wget" not in command
    url = healthcheck_url(instructions)
    assert url.port == PORT
    assert url.path == "/rag/health"
    assert url.hostname in {"127.0.0.1", "localhost"}


def test_cmd_runs_graphgate_serve(instructions):
    cmds = find(instructions, "CMD")
    assert cmds, "no CMD"
    argv = exec_or_shell(cmds[-1].args)
    assert argv == ["graphgate", "serve"]
    assert not find(instructions, "ENTRYPOINT")


# --------------------------------------------------------------------------
# docker-compose.yml
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict:
    assert COMPOSE_FILE.is_file(), "docker-compose.yml is missing"
    data = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def service_env(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.partition("=")[::2] for item in env)
    return env


def depends_on(service: dict) -> list[str]:
    deps = service.get("depends_on") or []
    return list(deps) if isinstance(deps, (list, dict)) else [deps]


def published_ports(service: dict) -> list[tuple[str | None, str, str]]:
    """(host_ip, published, target) for each ports entry."""
    result = []
    for entry in service.get("ports") or []:
        if isinstance(entry, dict):
            result.append((entry.get("host_ip"), str(entry["published"]), str(entry["target"])))
            continue
        parts = str(entry).split("/")[0].split(":")
        if len(parts) == 3:
            result.append((parts[0], parts[1], parts[2]))
        elif len(parts) == 2:
            result.append((None, parts[0], parts[1]))
        else:
            result.append((None, "", parts[0]))
    return result


def named_volumes(service: dict) -> list[str]:
    names = []
    for entry in service.get("volumes") or []:
        if isinstance(entry, dict):
            if entry.get("type", "volume") == "volume" and entry.get("source"):
                names.append(entry["source"])
            continue
        source, sep, _ = str(entry).partition(":")
        if sep and not source.startswith((".", "/", "~", "$")):
            names.append(source)
    return names


def test_compose_services(compose):
    assert set(compose["services"]) == {"ollama", "graphgate", "open-webui"}
    assert compose["services"]["ollama"]["image"].split(":")[0] == "ollama/ollama"
    assert compose["services"]["open-webui"]["image"].startswith("ghcr.io/open-webui/open-webui")


def test_compose_environment_values_are_strings(compose):
    # Unquoted true/false would reach the containers as Python-style booleans.
    for name, service in compose["services"].items():
        for key, value in service_env(service).items():
            assert isinstance(value, str), f"{name}: {key} should be a quoted string"


def test_graphgate_builds_here_and_talks_to_ollama(compose):
    graphgate = compose["services"]["graphgate"]
    build = graphgate["build"]
    context = build if isinstance(build, str) else build.get("context", ".")
    assert context in {".", "./"}
    env = service_env(graphgate)
    upstream = urlparse(env["GRAPHGATE_UPSTREAM"])
    assert upstream.hostname == "ollama"
    assert upstream.port == 11434
    assert env.get("GRAPHGATE_EMBED_MODEL") == "nomic-embed-text"
    assert "GRAPHGATE_LLM_MODEL" in env
    # The console password must come from the caller, never a default.
    assert re.fullmatch(r"\$\{GRAPHGATE_ADMIN_PASSWORD:\?[^}]+\}", env["GRAPHGATE_ADMIN_PASSWORD"])


def test_graphgate_data_volume(compose, instructions):
    graphgate = compose["services"]["graphgate"]
    mounts = {str(v).split(":")[1] for v in graphgate.get("volumes") or [] if ":" in str(v)}
    assert "/data" in mounts
    assert merged_env(instructions)["GRAPHGATE_DATA_DIR"] == "/data"


def test_ollama_is_internal_only(compose):
    ollama = compose["services"]["ollama"]
    assert not ollama.get("ports"), "Ollama should not be published on the host"
    assert "ollama" in named_volumes(ollama)
    assert "/root/.ollama" in {str(v).split(":")[1] for v in ollama.get("volumes") or []}


def test_open_webui_points_at_graphgate(compose):
    webui = compose["services"]["open-webui"]
    env = service_env(webui)
    base = urlparse(env["OLLAMA_BASE_URL"])
    assert base.hostname == "graphgate"
    assert base.port == PORT
    assert env.get("ENABLE_OPENAI_API", "").lower() == "false"
    assert env.get("ENABLE_PERSISTENT_CONFIG", "").lower() == "false"
    assert ("127.0.0.1", "3000", "8080") in published_ports(webui)
    assert "/app/backend/data" in {str(v).split(":")[1] for v in webui.get("volumes") or []}


def test_open_webui_sends_task_header(compose):
    raw = service_env(compose["services"]["open-webui"])["OLLAMA_API_CONFIGS"]
    # Compose would interpolate a "$"; the JSON must not contain one.
    assert "$" not in raw
    configs = json.loads(raw)
    headers = configs["0"]["headers"]
    assert headers["X-Task"] == "{{TASK}}"
    assert headers["X-Chat-Id"] == "{{CHAT_ID}}"


def test_named_volumes_are_declared(compose):
    declared = set(compose.get("volumes") or {})
    used = {name for service in compose["services"].values() for name in named_volumes(service)}
    assert used, "no named volumes used"
    assert used <= declared, f"undeclared volumes: {used - declared}"
    assert {"ollama", "graphgate-data", "open-webui"} <= used


def test_depends_on_names_defined_services(compose):
    services = compose["services"]
    for name, service in services.items():
        for dependency in depends_on(service):
            assert dependency in services, f"{name} depends on unknown service {dependency!r}"
            assert dependency != name
    assert "ollama" in depends_on(services["graphgate"])
    assert "graphgate" in depends_on(services["open-webui"])


def test_published_graphgate_port(compose):
    ports = published_ports(compose["services"]["graphgate"])
    assert ports == [("127.0.0.1", str(PORT), str(PORT))]


def test_ports_agree_everywhere(instructions, compose):
    env_port = int(merged_env(instructions)["GRAPHGATE_PORT"])
    exposed = {int(p.split("/")[0]) for ins in find(instructions, "EXPOSE") for p in ins.args.split()}
    health_port = healthcheck_url(instructions).port
    graphgate = compose["services"]["graphgate"]
    targets = {int(target) for _, _, target in published_ports(graphgate)}
    compose_env_port = service_env(graphgate).get("GRAPHGATE_PORT")
    webui_port = urlparse(service_env(compose["services"]["open-webui"])["OLLAMA_BASE_URL"]).port
    assert exposed == {env_port}
    assert health_port == env_port
    assert targets == {env_port}
    assert webui_port == env_port
    if compose_env_port is not None:
        assert int(compose_env_port) == env_port
    assert env_port == PORT


# --------------------------------------------------------------------------
# docker-compose.scale.yml (two replicas on PostgreSQL behind nginx)
# --------------------------------------------------------------------------

SCALE_FILE = ROOT / "docker-compose.scale.yml"
REPLICAS = ("graphgate-a", "graphgate-b")


@pytest.fixture(scope="module")
def scale() -> dict:
    assert SCALE_FILE.is_file(), "docker-compose.scale.yml is missing"
    data = yaml.safe_load(SCALE_FILE.read_text(encoding="utf-8"))   # merges the x-graphgate anchor
    assert isinstance(data, dict)
    return data


def nginx_config(scale: dict) -> str:
    [mount] = [str(v) for v in scale["services"]["proxy"]["volumes"] if str(v).endswith("default.conf:ro")]
    source = ROOT / mount.split(":")[0]
    assert source.is_file(), f"{source} is missing"
    return source.read_text(encoding="utf-8")


def required(value: str, name: str) -> bool:
    """A value compose refuses to start without (``${NAME:?message}``)."""
    return re.fullmatch(rf"\$\{{{name}:\?[^}}]+\}}", value) is not None


def test_scale_services(scale):
    services = scale["services"]
    assert set(services) == {"postgres", "ollama-a", "ollama-b", *REPLICAS, "proxy", "open-webui"}
    assert services["postgres"]["image"] == "pgvector/pgvector:pg17"
    assert all(services[o]["image"].split(":")[0] == "ollama/ollama" for o in ("ollama-a", "ollama-b"))
    assert services["open-webui"]["image"].startswith("ghcr.io/open-webui/open-webui")
    for name, service in services.items():
        for key, value in service_env(service).items():
            assert isinstance(value, str), f"{name}: {key} should be a quoted string"


def test_scale_postgres(scale):
    postgres = scale["services"]["postgres"]
    env = service_env(postgres)
    assert re.fullmatch(r"\$\{POSTGRES_PASSWORD:-[^}]+\}", env["POSTGRES_PASSWORD"])
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])
    assert "/var/lib/postgresql/data" in {str(v).split(":")[1] for v in postgres["volumes"]}
    assert not postgres.get("ports"), "PostgreSQL should not be published on the host"


def test_scale_replicas_are_interchangeable(scale):
    services = scale["services"]
    envs = [service_env(services[name]) for name in REPLICAS]
    assert envs[0] == envs[1]
    env = envs[0]
    store = urlparse(env["GRAPHGATE_STORE"])
    postgres_env = service_env(services["postgres"])
    assert store.scheme == "postgresql" and store.hostname == "postgres" and store.port == 5432
    assert store.username == postgres_env["POSTGRES_USER"] and store.path == "/" + postgres_env["POSTGRES_DB"]
    assert store.password == postgres_env["POSTGRES_PASSWORD"]   # the same variable, the same default
    upstreams = [urlparse(url) for url in env["GRAPHGATE_UPSTREAM"].split(",")]
    assert [(u.hostname, u.port) for u in upstreams] == [("ollama-a", 11434), ("ollama-b", 11434)]
    assert env["GRAPHGATE_HOST"] == "0.0.0.0"
    for name in ("GRAPHGATE_ADMIN_PASSWORD", "GRAPHGATE_API_KEY", "GRAPHGATE_SESSION_SECRET"):
        assert required(env[name], name), name
    from proxy.core.settings import SETTINGS

    assert {k for k in env if k.startswith("GRAPHGATE_")} <= {s.env for s in SETTINGS}
    for name in REPLICAS:
        replica = services[name]
        assert replica["build"] in {".", "./"}
        assert not replica.get("ports"), f"{name} is reached through the proxy only"
        assert any(str(v).endswith(":/data") for v in replica["volumes"]), name
        assert replica["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_scale_replicas_keep_their_own_data_volume(scale):
    """What a replica keeps on disk (its keyword indexes) is its own; what they share is in PostgreSQL.
    The first replica has the one-machine stack's volume, whose lists' files are imported once."""
    volumes = {name: [str(v) for v in scale["services"][name]["volumes"] if str(v).endswith(":/data")]
               for name in REPLICAS}
    assert volumes["graphgate-a"] == ["graphgate-data:/data"]
    assert len({tuple(v) for v in volumes.values()}) == len(REPLICAS), volumes


def test_scale_only_proxy_and_webui_are_published(scale):
    published = {name: published_ports(service) for name, service in scale["services"].items()
                 if service.get("ports")}
    assert published == {"proxy": [("127.0.0.1", str(PORT), str(PORT))],
                         "open-webui": [("127.0.0.1", "3000", "8080")]}


def test_scale_proxy_streams_to_both_replicas(scale):
    config = nginx_config(scale)
    assert re.search(rf"^\s*listen\s+{PORT};", config, re.M)
    for replica in REPLICAS:
        assert re.search(rf"^\s*server\s+{replica}:{PORT}\b", config, re.M), replica
    assert re.search(r"^\s*proxy_buffering\s+off;", config, re.M)
    read_timeout = re.search(r"^\s*proxy_read_timeout\s+(\d+)s;", config, re.M)
    assert read_timeout and int(read_timeout.group(1)) >= 600
    assert re.search(r"^\s*client_max_body_size\s+0;", config, re.M)   # GraphGate bounds bodies itself
    assert set(depends_on(scale["services"]["proxy"])) == set(REPLICAS)


def test_scale_open_webui_points_at_the_proxy(scale):
    env = service_env(scale["services"]["open-webui"])
    base = urlparse(env["OLLAMA_BASE_URL"])
    assert (base.hostname, base.port) == ("proxy", PORT)
    assert env.get("ENABLE_OPENAI_API", "").lower() == "false"
    assert env.get("ENABLE_PERSISTENT_CONFIG", "").lower() == "false"
    raw = env["OLLAMA_API_CONFIGS"]
    [variable] = re.findall(r"\$\{[^}]+\}", raw)   # the one value compose fills in: the API key
    assert required(variable, "GRAPHGATE_API_KEY")
    configs = json.loads(raw.replace(variable, "gg_key"))
    assert configs["0"]["key"] == "gg_key"
    assert configs["0"]["headers"] == {"X-Task": "{{TASK}}", "X-Chat-Id": "{{CHAT_ID}}"}


def test_scale_volumes_and_dependencies(scale):
    services = scale["services"]
    used = {name for service in services.values() for name in named_volumes(service)}
    assert used <= set(scale.get("volumes") or {}), f"undeclared volumes: {used - set(scale['volumes'])}"
    # ollama, graphgate-data and open-webui are docker-compose.yml's: the one-machine stack's carry over
    assert {"postgres", "ollama", "ollama-b", "graphgate-data", "open-webui"} <= used
    for name, service in services.items():
        for dependency in depends_on(service):
            assert dependency in services and dependency != name, f"{name} depends on {dependency!r}"
