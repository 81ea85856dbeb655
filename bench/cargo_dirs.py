"""Where Cargo put the release build, for the benchmark scripts: what
tools/cargo-target-dir says (CARGO_TARGET_DIR and Cargo configs honoured),
never a hard-coded target/."""

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def release_dir():
    """Cargo's release directory (holds toyvm, examples/, libperfsupport)."""
    tool = os.path.join(ROOT, "tools", "cargo-target-dir")
    target = subprocess.run([tool], check=True, capture_output=True, text=True).stdout.strip()
    return os.path.join(target, "release")
