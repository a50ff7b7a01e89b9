"""`unichunk tokens` as a user runs it (the real console command, its own process, a fresh data dir on each
records backend): the token printed once and never listed, bad input refused with exit 2 and nothing
stored, and `--token` naming nobody refused before an in-process command reads anything."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def _cli(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in {"UNICHUNK_TOKEN", "UNICHUNK_API_TOKEN"}}
    env |= {"UNICHUNK_DATA_DIR": str(data)}
    env.pop("UNICHUNK_SERVICE_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "unichunk.deployments.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_tokens_create_list_revoke(records_settings) -> None:  # type: ignore[no-untyped-def]
    data = records_settings.data_dir
    made = _cli(data, "tokens", "create", "--label", "HR", "--label", "eng", "--name", "alice")
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert token.startswith("uck_") and "\n" not in token and "Shown this once" in made.stderr
    as_json = json.loads(_cli(data, "tokens", "create", "--admin", "--json").stdout)
    assert as_json["token"].startswith(f"uck_{as_json['id']}_") and as_json["may_write"] and as_json["admin"]

    listed = _cli(data, "tokens", "list", "--json")
    assert listed.returncode == 0 and token not in listed.stdout and as_json["token"] not in listed.stdout
    rows = {row["name"]: row for row in json.loads(listed.stdout)["tokens"]}
    assert rows["alice"]["labels"] == ["eng", "hr"] and rows["alice"]["revoked_at"] is None
    assert "token" not in rows["alice"] and "hash" not in rows["alice"]

    assert _cli(data, "tokens", "revoke", "alice").returncode == 0
    after = {row["name"]: row for row in json.loads(_cli(data, "tokens", "list", "--json").stdout)["tokens"]}
    assert after["alice"]["revoked_at"]  # by name: tokens made in one second list in either order
    for args, says in (
        (("tokens", "revoke", "nobody"), "no such token"),
        (("tokens", "create", "--name", "alice"), "exists already"),
        (("tokens", "create", "--label", "not a label"), "bad label"),
        (("tokens", "create", "--name", "two words"), "bad token name"),
    ):
        refused = _cli(data, *args)
        assert refused.returncode == 2 and says in refused.stderr and refused.stderr.count("\n") == 1, args
    assert len(json.loads(_cli(data, "tokens", "list", "--json").stdout)["tokens"]) == 2


@pytest.mark.parametrize("token", ["not-a-token", "uck_0000000000000000_" + "A" * 43])
def test_an_in_process_command_with_a_token_naming_nobody_exits_2(tmp_path: Path, token: str) -> None:
    refused = _cli(tmp_path / "data", "--token", token, "status")
    assert refused.returncode == 2, refused.stderr
    assert "unknown or revoked" in refused.stderr and token not in refused.stderr
