"""Running the real opencode (npm `opencode-ai`, pinned in
tests/e2e/package.json, installed by scripts/e2e) headless (`opencode run`)
and offline.

Every run gets its own HOME and XDG folders (config, sessions, caches kept
apart), no models.dev fetch, no update check, no LSP download, no sharing.
"""

from __future__ import annotations

import os
from pathlib import Path

E2E = Path(__file__).resolve().parent
OPENCODE = E2E / "node_modules" / ".bin" / "opencode"
VERSION = "1.18.33"
ANTHROPIC_KEY = "sk-ant-opencode-e2e-0123456789"
MODEL = "anthropic/claude-sonnet-4-5"
OPENAI_MODEL = "openai/gpt-5"
RUN_TIMEOUT = 120.0

_DROP_PREFIXES = ("ANTHROPIC_", "OPENAI_", "GOOGLE_", "GEMINI_", "OPENCODE_", "TOOLSTUB_", "CLAUDE_", "AWS_")
_DROP = {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}


def env_for(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(_DROP_PREFIXES) and k.lower() not in _DROP}
    home.mkdir(parents=True, exist_ok=True)
    env.update({
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_SHARE": "1",
        "OPENCODE_DISABLE_CLAUDE_CODE": "1",
        "NO_PROXY": "127.0.0.1,localhost",
        "CI": "1",
        "TERM": "dumb",
        "NO_COLOR": "1",
    })
    return env


def command(text_: str, *, cwd: Path, cont: bool = False, model: str = MODEL) -> list[str]:
    if not OPENCODE.exists():
        raise FileNotFoundError(f"opencode is not installed at {OPENCODE}: run scripts/e2e")
    args = [str(OPENCODE), "run", "--dir", str(cwd), "-m", model]
    if cont:
        args.append("--continue")
    return [*args, text_]
