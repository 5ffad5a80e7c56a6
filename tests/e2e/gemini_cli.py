"""Running the real Gemini CLI (pinned in tests/e2e/package.json, installed
by scripts/e2e into tests/e2e/node_modules) headless and offline.

Every run gets its own HOME, whose ``.gemini/settings.json`` chooses API-key
auth and turns off telemetry, update checks and the like; it talks only to
``base_url`` (``GOOGLE_GEMINI_BASE_URL``) and is bounded by a timeout.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

E2E = Path(__file__).resolve().parent
GEMINI = E2E / "node_modules" / ".bin" / "gemini"
VERSION = "0.61.0"
API_KEY = "AIzaSy-e2e-test-key-0123456789"
MODEL = "gemini-2.5-pro"
RUN_TIMEOUT = 120.0

# Variables of the outer environment that must not reach the CLI: other
# credentials, other endpoints, HTTP proxies.
_DROP_PREFIXES = ("GEMINI_", "GOOGLE_", "VERTEX_", "CLOUDSDK_", "ANTHROPIC_", "OPENAI_", "TOOLSTUB_", "OTEL_")
_DROP = {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}

SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
}


def write_settings(home: Path) -> None:
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps(SETTINGS, indent=2))


def env_for(home: Path, base_url: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(_DROP_PREFIXES) and k.lower() not in _DROP}
    home.mkdir(parents=True, exist_ok=True)
    write_settings(home)
    env.update({
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "GEMINI_API_KEY": API_KEY,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "NO_PROXY": "127.0.0.1,localhost",
        "CI": "1",
        "TERM": "dumb",
        "NO_COLOR": "1",
    })
    if base_url is not None:
        env["GOOGLE_GEMINI_BASE_URL"] = base_url
    return env


@dataclass
class Run:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        return (f"gemini {' '.join(self.args)} -> exit {self.returncode}\n"
                f"--- stdout ---\n{self.stdout[-4000:]}\n--- stderr ---\n{self.stderr[-4000:]}")


def command(args: list[str]) -> list[str]:
    if not GEMINI.exists():
        raise FileNotFoundError(f"Gemini CLI is not installed at {GEMINI}: run scripts/e2e")
    return [str(GEMINI), *args]


def prompt(text_: str, *, base_url: str, home: Path, cwd: Path, resume: bool = False,
           timeout: float = RUN_TIMEOUT) -> Run:
    """``gemini -p TEXT --yolo`` headless (``--resume latest`` for a next turn)."""
    args = ["-m", MODEL, "-p", text_, "--yolo"]
    if resume:
        args = ["--resume", "latest", *args]
    p = subprocess.run(command(args), cwd=cwd, env=env_for(home, base_url), stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=timeout)
    return Run(args=args, returncode=p.returncode, stdout=p.stdout, stderr=p.stderr)
