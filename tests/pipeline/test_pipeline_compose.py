"""docker-compose.yml, the Dockerfile, prometheus.yml and the Grafana files, checked without a Docker daemon:
`docker compose config` (or Debian's docker-compose) validates the file when installed (.ci/setup installs
it); the parsed file is one coherent stack (every unichunk process on the same Qdrant, Neo4j, Prefect,
Pushgateway and data volume; Prefect on Postgres; a Qdrant within one minor version of the installed
client; a health check on every service; a token wherever our port is published); every setting we pass
is one our code (or Prefect) reads; every mounted file exists; every metric a dashboard panel queries is
one our code registers."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
SERVICES: dict = COMPOSE["services"]
_INTERPOLATION = re.compile(r"\$\{([A-Z0-9_]+)(?::?[-?][^}]*)?\}")


def _environment(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {key: str(value) for key, value in env.items() if key != "<<"}


def _known_unichunk_variables() -> set[str]:
    from unichunk.deployments.configuration import variables

    return set(variables())


def _prefect_variables() -> set[str]:
    """Every PREFECT_* name Prefect's settings accept (aliases such as PREFECT_UI_API_URL included)."""
    from prefect.settings import Settings
    from prefect.settings.legacy import _get_valid_setting_names

    return set(_get_valid_setting_names(Settings))


def test_services_are_all_there_with_image_or_build() -> None:
    expected = {
        "qdrant",
        "neo4j",
        "postgres",
        "prefect-server",
        "unichunk-db",
        "deploy",
        "worker-1",
        "worker-2",
        "webhook",
        "prometheus",
        "pushgateway",
        "grafana",
    }
    assert expected <= set(SERVICES)
    for name, service in SERVICES.items():
        assert ("image" in service) != ("build" in service), f"{name}: exactly one of image/build"
        if "build" in service:
            assert (REPO_ROOT / service["build"] / "Dockerfile").is_file(), name


def test_ports_are_strings_and_unique() -> None:
    published: list[str] = []
    for name, service in SERVICES.items():
        for port in service.get("ports", []):
            assert isinstance(port, str), (
                f"{name}: port {port!r} must be a string (YAML reads 60:60 as base 60)"
            )
            assert re.fullmatch(r"\d+:\d+", port), f"{name}: {port}"
            published.append(port.split(":")[0])
    assert len(published) == len(set(published)), "two services publish the same host port"


def test_depends_on_targets_exist_and_health_conditions_have_healthchecks() -> None:
    for name, service in SERVICES.items():
        depends = service.get("depends_on", {})
        items = depends.items() if isinstance(depends, dict) else ((d, {}) for d in depends)
        for target, spec in items:
            assert target in SERVICES, f"{name} depends on unknown service {target}"
            condition = spec.get("condition", "service_started")
            assert condition in ("service_started", "service_healthy", "service_completed_successfully")
            if condition == "service_healthy":
                assert "healthcheck" in SERVICES[target], f"{name} waits for {target} health it never reports"


def test_healthcheck_shapes() -> None:
    checks = {name: s["healthcheck"] for name, s in SERVICES.items() if "healthcheck" in s}
    assert set(checks) == set(SERVICES), f"no health check: {sorted(set(SERVICES) - set(checks))}"
    for name, check in checks.items():
        test = check["test"]
        assert isinstance(test, list) and test[0] in ("CMD", "CMD-SHELL") and len(test) >= 2, name
        for key in ("interval", "timeout", "start_period"):
            if key in check:
                assert re.fullmatch(r"\d+(ms|s|m|h)", check[key]), f"{name}.{key}={check[key]}"
        assert isinstance(check.get("retries", 1), int), name


def test_named_volumes_are_declared_and_bind_mounts_exist() -> None:
    declared = set(COMPOSE.get("volumes") or {})
    for name, service in SERVICES.items():
        for volume in service.get("volumes", []):
            if volume.startswith("${"):  # ${UNICHUNK_SOURCES:-default}:/target: check the default
                match = re.match(r"^\$\{[A-Z_]+:-([^}]*)\}:", volume)
                assert match, f"{name}: interpolated mount {volume} needs a default"
                source = match[1]
            else:
                source = volume.split(":")[0]
            if source.startswith((".", "/")):
                assert (REPO_ROOT / source).exists(), f"{name} mounts missing {source}"
            else:
                assert source in declared, f"{name} uses undeclared volume {source}"


def test_every_variable_our_services_get_is_one_something_reads() -> None:
    unichunk = _known_unichunk_variables()
    prefect = _prefect_variables()
    others = {"PUSHGATEWAY_URL", "HF_HUB_OFFLINE", "DO_NOT_TRACK"}
    ours = [name for name, s in SERVICES.items() if "build" in s] + ["prefect-server"]
    for name in ours:
        for key in _environment(SERVICES[name]) | _environment(COMPOSE["x-unichunk-env"]):
            if key.startswith("UNICHUNK_"):
                assert key in unichunk, f"{name}: {key} is not a setting our code reads"
            elif key.startswith("PREFECT_"):
                assert key in prefect, f"{name}: {key} is not a Prefect setting"
            else:
                assert key in others, f"{name}: unexpected variable {key}"


def _ours() -> list[str]:
    """The services running our image that read or write the stores (all but the one-shot `deploy`)."""
    return [name for name, service in SERVICES.items() if "build" in service and name != "deploy"]


WORKERS = ("worker-1", "worker-2")


STORE_VARIABLES = (
    "PREFECT_API_URL",
    "UNICHUNK_DATA_DIR",
    "UNICHUNK_SOURCE_ROOT",
    "UNICHUNK_QDRANT_URL",
    "UNICHUNK_NEO4J_URI",
    "UNICHUNK_NEO4J_USER",
    "UNICHUNK_NEO4J_PASSWORD",
    "UNICHUNK_DATABASE_URL",
    "PUSHGATEWAY_URL",
)


def test_every_unichunk_process_reads_the_same_stores() -> None:
    """The receiver's /search once had its own volume and no Qdrant/Neo4j: it answered from empty
    embedded stores. Every process of our image must point at the same servers and the same data."""
    assert set(_ours()) == {*WORKERS, "webhook"}
    envs = {name: _environment(SERVICES[name]) for name in _ours()}
    for variable in STORE_VARIABLES:
        values = {name: env.get(variable) for name, env in envs.items()}
        assert None not in values.values(), f"{variable} missing: {values}"
        assert len(set(values.values())) == 1, f"{variable} differs: {values}"
    env = envs["worker-1"]
    assert env["PREFECT_API_URL"] == "http://prefect-server:4200/api"
    assert env["UNICHUNK_QDRANT_URL"] == "http://qdrant:6333"
    assert env["UNICHUNK_NEO4J_URI"] == "bolt://neo4j:7687"
    assert env["PUSHGATEWAY_URL"] == "http://pushgateway:9091"
    # Neo4j's password and ours are the same interpolation.
    neo4j_auth = _environment(SERVICES["neo4j"])["NEO4J_AUTH"]
    assert _INTERPOLATION.findall(neo4j_auth) == _INTERPOLATION.findall(env["UNICHUNK_NEO4J_PASSWORD"])
    assert neo4j_auth.startswith(env["UNICHUNK_NEO4J_USER"] + "/")
    # One data volume (status tables, BM25, replay cache) and one sources mount, at the configured paths.
    mounts = {name: sorted(SERVICES[name]["volumes"]) for name in _ours()}
    assert len({tuple(m) for m in mounts.values()}) == 1, mounts
    targets = {v.split(":")[-2] if v.endswith(":ro") else v.split(":")[-1] for v in mounts["worker-1"]}
    assert {env["UNICHUNK_DATA_DIR"], env["UNICHUNK_SOURCE_ROOT"]} <= targets
    for name in _ours():
        depends = SERVICES[name]["depends_on"]
        for store in ("qdrant", "neo4j", "prefect-server", "unichunk-db"):
            assert depends[store]["condition"] == "service_healthy", f"{name} starts before {store} is ready"


def test_unichunk_records_have_a_postgres_of_their_own() -> None:
    """UNICHUNK_DATABASE_URL names the `unichunk-db` service (not Prefect's database), with its user,
    database and password."""
    url = _environment({"environment": COMPOSE["x-unichunk-env"]})["UNICHUNK_DATABASE_URL"]
    match = re.fullmatch(r"postgresql://([^:]+):(\$\{[^}]+\})@([a-z0-9-]+):5432/(\w+)", url)
    assert match, url
    user, password, host, database = match.groups()
    assert host == "unichunk-db" and SERVICES[host]["image"].startswith("postgres:")
    env = _environment(SERVICES[host])
    assert (env["POSTGRES_USER"], env["POSTGRES_DB"]) == (user, database)
    assert _INTERPOLATION.findall(env["POSTGRES_PASSWORD"]) == _INTERPOLATION.findall(password)
    prefect_url = _environment(SERVICES["prefect-server"])["PREFECT_API_DATABASE_CONNECTION_URL"]
    assert "@unichunk-db:" not in prefect_url


def test_two_workers_poll_the_pool_the_deploy_service_fills() -> None:
    """`deploy` creates the pool and registers prefect.yaml's deployments on it, once; both workers poll
    that pool and start only after it finished; the image carries prefect.yaml."""
    pool = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())["definitions"]["work_pool"]["name"]
    script = SERVICES["deploy"]["command"][-1]
    assert f"prefect work-pool create {pool} --type process" in script
    assert "prefect --no-prompt deploy --all" in script
    assert SERVICES["deploy"]["restart"] == "no"
    assert _environment(SERVICES["deploy"])["UNICHUNK_SOURCE_ROOT"] == "/sources"  # templated by prefect.yaml
    assert re.search(r"^COPY .*\bprefect\.yaml\b.* \./$", (REPO_ROOT / "Dockerfile").read_text(), re.M)
    for name in WORKERS:
        command = SERVICES[name]["command"]
        assert command[:2] == ["unichunk", "worker"] and command[command.index("--pool") + 1] == pool
        condition = SERVICES[name]["depends_on"]["deploy"]["condition"]
        assert condition == "service_completed_successfully", name


def test_published_unichunk_ports_require_the_api_token() -> None:
    """Port 8787 serves /search: published, it must refuse to start without UNICHUNK_API_TOKEN."""
    published = [name for name in _ours() if SERVICES[name].get("ports")]
    assert published == ["webhook"]
    for name in published:
        env = _environment(SERVICES[name])
        for required in ("UNICHUNK_API_TOKEN", "UNICHUNK_WEBHOOK_SECRET"):
            assert re.fullmatch(rf"\$\{{{required}:\?[^}}]+\}}", env.get(required, "")), (
                f"{name}: {required} must be ${{{required}:?message}}"
            )


def test_the_cli_in_any_of_our_containers_asks_the_api_service() -> None:
    """`unichunk serve` announces itself to CLI users through `<data dir>/service.json` (URL and pid); the
    compose receiver is uvicorn alone and a pid means nothing across containers, so every container of our
    image names the service by URL, with the token its API takes: `docker compose exec worker unichunk
    search ...` asks the warm service instead of loading the models."""
    receiver = SERVICES["webhook"]
    port = receiver["command"][receiver["command"].index("--port") + 1]
    assert f"{port}:{port}" in receiver["ports"]
    for name in _ours():
        env = _environment(SERVICES[name])
        assert env["UNICHUNK_SERVICE_URL"] == f"http://webhook:{port}", name
        assert env["UNICHUNK_API_TOKEN"] == _environment(receiver)["UNICHUNK_API_TOKEN"], name


def test_prefect_server_keeps_its_state_in_postgres() -> None:
    url = _environment(SERVICES["prefect-server"])["PREFECT_API_DATABASE_CONNECTION_URL"]
    match = re.fullmatch(r"postgresql\+asyncpg://([^:]+):(\$\{[^}]+\})@([a-z0-9-]+):5432/(\w+)", url)
    assert match, url
    user, password, host, database = match.groups()
    postgres = SERVICES[host]
    assert postgres["image"].startswith("postgres:")
    env = _environment(postgres)
    assert (env["POSTGRES_USER"], env["POSTGRES_DB"]) == (user, database)
    assert _INTERPOLATION.findall(env["POSTGRES_PASSWORD"]) == _INTERPOLATION.findall(password)
    assert SERVICES["prefect-server"]["depends_on"][host]["condition"] == "service_healthy"
    assert not any("/root/.prefect" in v for v in SERVICES["prefect-server"].get("volumes", []))


def _minor(text: str) -> tuple[int, int]:
    major, minor = re.match(r"v?(\d+)\.(\d+)", text).groups()  # type: ignore[union-attr]
    return int(major), int(minor)


def test_qdrant_image_is_within_one_minor_version_of_the_client() -> None:
    """qdrant-client warns (and may misbehave) when the server's major differs or its minor is more than
    one away: Qdrant 1.12 against client 1.20 did."""
    image, _, tag = SERVICES["qdrant"]["image"].partition(":")
    assert image == "qdrant/qdrant" and re.fullmatch(r"v\d+\.\d+\.\d+", tag), tag
    server, client = _minor(tag), _minor(version("qdrant-client"))
    assert server[0] == client[0] and abs(server[1] - client[1]) <= 1, (tag, version("qdrant-client"))


def test_the_dockerfile_copies_every_package_the_project_installs() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    packages = {"unichunk", *project["tool"]["setuptools"]["package-dir"].values()}
    copied = set(re.findall(r"^COPY (\w+) \./\1$", (REPO_ROOT / "Dockerfile").read_text(), re.M))
    assert packages <= copied, f"not copied into the image: {sorted(packages - copied)}"


def _compose_command() -> list[str] | None:
    """`docker compose` (the v2 plugin) if installed, else Debian's `docker-compose` (.ci/setup installs it)."""
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy else None


@pytest.mark.skipif(_compose_command() is None, reason="neither docker compose nor docker-compose installed")
def test_docker_compose_config_validates(tmp_path: Path) -> None:
    """Compose's own schema check, offline (no daemon needed); and the required secrets really are."""
    command = [
        *_compose_command(),
        "--project-directory",
        str(REPO_ROOT),
        "-f",
        str(REPO_ROOT / "docker-compose.yml"),
    ]  # type: ignore[misc]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("UNICHUNK_", "NEO4J_", "POSTGRES_"))}
    base["DOCKER_CONFIG"] = str(tmp_path)  # no user config, no credential helpers
    secrets = {"UNICHUNK_WEBHOOK_SECRET": "s", "UNICHUNK_API_TOKEN": "t"}
    result = subprocess.run([*command, "config", "-q"], env=base | secrets, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    for missing in secrets:
        env = base | {k: v for k, v in secrets.items() if k != missing}
        result = subprocess.run([*command, "config", "-q"], env=env, capture_output=True, text=True)
        assert result.returncode != 0 and missing in result.stderr, (missing, result.stderr)


def test_service_commands_exist() -> None:
    from typer.main import get_command

    from unichunk.deployments.cli.main import app

    cli = get_command(app)
    for name in WORKERS:
        command = SERVICES[name]["command"]
        assert command[0] == "unichunk" and command[1] in cli.commands
        options = {opt for p in cli.commands[command[1]].params for opt in (*p.opts, *p.secondary_opts)}
        assert {arg for arg in command[2:] if arg.startswith("--")} <= options, name
    webhook = SERVICES["webhook"]["command"]
    factory = webhook[webhook.index("--factory") + 1]
    module, _, attr = factory.partition(":")
    import importlib

    assert callable(getattr(importlib.import_module(module), attr))


def test_prometheus_config_scrapes_pushgateway_receiver_and_workers() -> None:
    config = yaml.safe_load((REPO_ROOT / "deployments" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    targets = {job: [t for sc in j["static_configs"] for t in sc["targets"]] for job, j in jobs.items()}
    assert jobs["pushgateway"]["honor_labels"] is True
    assert targets["pushgateway"] == ["pushgateway:9091"]
    assert targets["unichunk-webhook"] == ["webhook:8787"]
    assert targets["unichunk-workers"] == [f"{name}:9464" for name in WORKERS]
    for name in WORKERS:
        command = SERVICES[name]["command"]
        assert command[command.index("--metrics-port") + 1] == "9464", name
    for target in (t for ts in targets.values() for t in ts):
        assert target.split(":")[0] in SERVICES


def test_prometheus_rule_files_are_mounted_beside_its_config() -> None:
    """Rules prometheus.yml names (deployments/alerts.yml) must be files mounted into the container."""
    config = yaml.safe_load((REPO_ROOT / "deployments" / "prometheus.yml").read_text())
    mounted = {
        v.split(":")[1]: REPO_ROOT / v.split(":")[0]
        for v in SERVICES["prometheus"]["volumes"]
        if v.startswith("./")
    }
    config_dir = Path(SERVICES["prometheus"]["command"][0].split("=", 1)[1]).parent
    for rule_file in config.get("rule_files") or []:
        target = str(config_dir / rule_file)
        assert target in mounted, f"{rule_file} is not mounted at {target}"
        assert mounted[target].is_file(), mounted[target]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_prometheus_config_passes_promtool() -> None:
    result = subprocess.run(
        ["promtool", "check", "config", "--syntax-only", str(REPO_ROOT / "deployments" / "prometheus.yml")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_grafana_provisioning_and_dashboard_metrics_exist() -> None:
    grafana = REPO_ROOT / "deployments" / "grafana"
    datasources = yaml.safe_load((grafana / "provisioning" / "datasources" / "prometheus.yml").read_text())
    (source,) = datasources["datasources"]
    assert source["url"] == "http://prometheus:9090" and source["type"] == "prometheus"
    providers = yaml.safe_load((grafana / "provisioning" / "dashboards" / "unichunk.yml").read_text())
    mounted = {v.split(":")[1] for v in SERVICES["grafana"]["volumes"] if v.startswith("./")}
    assert providers["providers"][0]["options"]["path"] in mounted

    dashboard = json.loads((grafana / "dashboards" / "unichunk.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert all(t["datasource"]["uid"] == source["uid"] for p in dashboard["panels"] for t in p["targets"])
    referenced = {m for e in exprs for m in re.findall(r"\bunichunk_[a-z_]+", e)}

    # Every series a panel queries must be one our code exports.
    from prometheus_client import REGISTRY

    import unichunk.chunking.metrics
    import unichunk.deployments.service.webhook
    import unichunk.index.metrics
    import unichunk.sinks.metrics  # noqa: F401

    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    exported = {m.name + sfx for m in REGISTRY.collect() for sfx in suffixes.get(m.type, ("",))}
    assert referenced and referenced <= exported, f"not exported: {sorted(referenced - exported)}"
    titles = " ".join(p["title"].lower() for p in dashboard["panels"])
    for topic in ("documents", "chunks written", "p95", "truncation", "alignment", "webhook"):
        assert topic in titles, topic
