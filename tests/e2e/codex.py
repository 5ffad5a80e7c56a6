"""Running the real Codex CLI (pinned in tests/e2e/package.json, installed by
scripts/e2e into tests/e2e/node_modules) headless and offline.

Every run gets its own CODEX_HOME and HOME (config, sessions and logs kept
apart), talks only to ``base_url`` through a custom provider
(``wire_api = "responses"``), makes one attempt per request (Codex retries
forever when the upstream is unreachable and several times on errors: both
retry counts are 0) and is bounded by a timeout.

    codex exec --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox
               [--ephemeral] -c model_provider=toolstub-e2e
               -c 'model_providers.toolstub-e2e={name=..., base_url=..., wire_api="responses", env_key=...}'
               -m MODEL PROMPT
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

E2E = Path(__file__).resolve().parent
CODEX = E2E / "node_modules" / ".bin" / "codex"
VERSION = "0.171.0"
API_KEY = "sk-codex-e2e-0123456789"
# Not a TOOLSTUB_* name: toolstub rejects unknown TOOLSTUB_* variables at start-up,
# and `toolstub wrap` shares its environment with the CLI it runs.
KEY_ENV = "E2E_CODEX_KEY"
PROVIDER = "toolstub-e2e"
MODEL = "gpt-mock-codex"
RUN_TIMEOUT = 90.0

# Variables of the outer environment that must not reach Codex: other
# credentials, other endpoints, HTTP proxies, and its own settings.
_DROP_PREFIXES = ("OPENAI_", "CODEX_", "ANTHROPIC_", "OTEL_", "TOOLSTUB_", "AZURE_", "AWS_")
_DROP = {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}


def env_for(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(_DROP_PREFIXES) and k.lower() not in _DROP}
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)  # Codex refuses a CODEX_HOME that does not exist
    env.update({
        "HOME": str(home),
        "CODEX_HOME": str(codex_home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        KEY_ENV: API_KEY,
        "NO_PROXY": "127.0.0.1,localhost",
        "RUST_LOG": "error",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "CI": "1",
    })
    return env


def provider_args(base_url: str) -> list[str]:
    """The custom provider pointing at ``base_url`` (which ends in /v1), one
    attempt per request and per stream."""
    provider = (f'{{name="toolstub e2e",base_url="{base_url}",wire_api="responses",env_key="{KEY_ENV}",'
                f'request_max_retries=0,stream_max_retries=0,stream_idle_timeout_ms=30000}}')
    return ["-c", f"model_provider={PROVIDER}", "-c", f"model_providers.{PROVIDER}={provider}",
            # No update check, no analytics, no feedback: nothing beside the provider.
            "-c", "check_for_update_on_startup=false", "-c", "analytics.enabled=false",
            "-c", "feedback.enabled=false", "-c", "history.persistence=\"none\"",
            "-m", MODEL]


@dataclass
class Run:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    last_message: str | None = None

    def describe(self) -> str:
        return (f"codex {' '.join(self.args)[:600]} -> exit {self.returncode}\n"
                f"--- stdout ---\n{self.stdout[-4000:]}\n--- stderr ---\n{self.stderr[-4000:]}")

    def events(self) -> list[dict]:
        """The JSONL events of a ``--json`` run."""
        out = []
        for line in self.stdout.splitlines():
            line = line.strip()
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        return out


def run(args: list[str], *, home: Path, cwd: Path, timeout: float = RUN_TIMEOUT,
        extra_env: dict[str, str] | None = None) -> Run:
    """``codex ARGS`` headless; a run over ``timeout`` seconds is killed and fails the test."""
    if not CODEX.exists():
        raise FileNotFoundError(f"Codex is not installed at {CODEX}: run scripts/e2e")
    env = env_for(home)
    env.update(extra_env or {})
    p = subprocess.run([str(CODEX), *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=timeout)
    return Run(args=args, returncode=p.returncode, stdout=p.stdout, stderr=p.stderr)


def exec_(prompt: str, *, base_url: str, home: Path, cwd: Path, ephemeral: bool = True, resume: bool = False,
          extra: list[str] | None = None, timeout: float = RUN_TIMEOUT) -> Run:
    """``codex exec`` (or ``codex exec resume --last``) of one prompt; the last
    agent message is read from ``-o``."""
    out = home / f"last-message-{os.getpid()}-{len(list(home.glob('last-message-*')))}.txt"
    common = ["--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
              *provider_args(base_url), "-o", str(out), *(extra or [])]
    if resume:
        args = ["exec", "resume", "--last", *common, prompt]
    else:
        args = ["exec", *(["--ephemeral"] if ephemeral else []), *common, prompt]
    r = run(args, home=home, cwd=cwd, timeout=timeout)
    r.last_message = out.read_text() if out.exists() else None
    return r
