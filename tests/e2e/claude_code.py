"""Running the real Claude Code CLI (pinned in tests/e2e/package.json,
installed by scripts/e2e into tests/e2e/node_modules) headless and offline.

Every run gets its own HOME (settings, sessions and the project history kept
apart), talks only to ``base_url``, and is bounded by a timeout.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

E2E = Path(__file__).resolve().parent
CLAUDE = E2E / "node_modules" / ".bin" / "claude"
VERSION = "2.1.328"
API_KEY = "sk-ant-test-e2e-0123456789"
RUN_TIMEOUT = 120.0

# Variables of the outer environment that must not reach Claude Code: other
# credentials, other endpoints, HTTP proxies, and its own settings.
_DROP_PREFIXES = ("ANTHROPIC_", "CLAUDE_", "OTEL_", "TOOLSTUB_", "AWS_", "GOOGLE_", "VERTEX_")
_DROP = {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}


def env_for(base_url: str, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(_DROP_PREFIXES) and k.lower() not in _DROP}
    home.mkdir(parents=True, exist_ok=True)
    env.update({
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": API_KEY,
        "NO_PROXY": "127.0.0.1,localhost",
        # Offline: no telemetry, error reports, update checks or other side traffic.
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_BUG_COMMAND": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
        "CLAUDE_CODE_IDE_SKIP_AUTO_INSTALL": "1",
        "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
        # One attempt per request: a failure shows at once instead of after retries.
        "CLAUDE_CODE_MAX_RETRIES": "0",
        "API_TIMEOUT_MS": "60000",
        "CI": "1",
        "TERM": "dumb",
        "NO_COLOR": "1",
    })
    return env


@dataclass
class Run:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        return (f"claude {' '.join(self.args)} -> exit {self.returncode}\n"
                f"--- stdout ---\n{self.stdout[-4000:]}\n--- stderr ---\n{self.stderr[-4000:]}")


def run(args: list[str], *, base_url: str, home: Path, cwd: Path, timeout: float = RUN_TIMEOUT,
        extra_env: dict[str, str] | None = None) -> Run:
    """``claude ARGS`` headless; a run over ``timeout`` seconds is killed and fails the test."""
    if not CLAUDE.exists():
        raise FileNotFoundError(f"Claude Code is not installed at {CLAUDE}: run scripts/e2e")
    env = env_for(base_url, home)
    for name, value in (extra_env or {}).items():
        if value is None:  # None: the variable is removed
            env.pop(name, None)
        else:
            env[name] = value
    p = subprocess.run([str(CLAUDE), *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=timeout)
    return Run(args=args, returncode=p.returncode, stdout=p.stdout, stderr=p.stderr)


def prompt(text_: str, *, base_url: str, home: Path, cwd: Path, cont: bool = False,
           allowed: str = "Read,Bash", timeout: float = RUN_TIMEOUT,
           extra_env: dict[str, str] | None = None) -> Run:
    args = ["-p", text_, "--allowedTools", allowed]
    if cont:
        args.insert(0, "--continue")
    return run(args, base_url=base_url, home=home, cwd=cwd, timeout=timeout, extra_env=extra_env)


def foundry_env(base_url: str, key: str = "foundry-e2e-key-0123") -> dict[str, str]:
    """Claude Code on Microsoft Foundry through ``base_url`` (a resource's
    Anthropic endpoint, ``{base}/anthropic``)."""
    return {"CLAUDE_CODE_USE_FOUNDRY": "1", "ANTHROPIC_FOUNDRY_BASE_URL": base_url + "/anthropic",
            "ANTHROPIC_FOUNDRY_API_KEY": key}


def bedrock_env(base_url: str, region: str = "us-east-1") -> dict[str, str]:
    """Claude Code on Amazon Bedrock through ``base_url``, its own AWS
    signing skipped (the proxy signs)."""
    return {"CLAUDE_CODE_USE_BEDROCK": "1", "CLAUDE_CODE_SKIP_BEDROCK_AUTH": "1",
            "ANTHROPIC_BEDROCK_BASE_URL": base_url, "AWS_REGION": region}


def vertex_env(base_url: str, project: str = "proj-e2e", region: str = "us-east5") -> dict[str, str]:
    """Claude Code on Vertex AI through ``base_url`` (its own Google auth
    skipped, as for a gateway that authenticates upstream)."""
    return {"CLAUDE_CODE_USE_VERTEX": "1", "CLAUDE_CODE_SKIP_VERTEX_AUTH": "1",
            "ANTHROPIC_VERTEX_BASE_URL": base_url + "/v1", "ANTHROPIC_VERTEX_PROJECT_ID": project,
            "CLOUD_ML_REGION": region}
