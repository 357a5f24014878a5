"""A PEP 517 build backend for the c4 package, standard library only: `pip install ./python`
works offline, with neither setuptools nor wheel installed."""

from __future__ import annotations

import base64
import hashlib
import os
import tarfile
import zipfile
from typing import Dict, List, Optional

NAME = "c4_trainer"
DIST = "c4-trainer"
VERSION = "0.1.0"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAG = "py3-none-any"


def _metadata() -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    return ("Metadata-Version: 2.1\n"
            f"Name: {DIST}\nVersion: {VERSION}\n"
            "Summary: Tell C4's node plugin a trainer's checkpoints and pauses; pure Python\n"
            "Requires-Python: >=3.8\n"
            "Description-Content-Type: text/markdown\n\n" + readme)


def _sources() -> List[str]:
    pkg = os.path.join(ROOT, "c4")
    return sorted(os.path.join("c4", f) for f in os.listdir(pkg) if f.endswith(".py"))


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def _dist_info_files() -> Dict[str, bytes]:
    return {
        "METADATA": _metadata().encode(),
        "WHEEL": (f"Wheel-Version: 1.0\nGenerator: c4_build\nRoot-Is-Purelib: true\n"
                  f"Tag: {TAG}\n").encode(),
    }


def get_requires_for_build_wheel(config_settings: Optional[dict] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[dict] = None) -> List[str]:
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str,
                                     config_settings: Optional[dict] = None) -> str:
    info = f"{NAME}-{VERSION}.dist-info"
    os.makedirs(os.path.join(metadata_directory, info), exist_ok=True)
    for name, data in _dist_info_files().items():
        with open(os.path.join(metadata_directory, info, name), "wb") as f:
            f.write(data)
    return info


def build_wheel(wheel_directory: str, config_settings: Optional[dict] = None,
                metadata_directory: Optional[str] = None) -> str:
    wheel = f"{NAME}-{VERSION}-{TAG}.whl"
    info = f"{NAME}-{VERSION}.dist-info"
    records = []
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w",
                         zipfile.ZIP_DEFLATED) as z:
        files = {p: open(os.path.join(ROOT, p), "rb").read() for p in _sources()}
        files.update({f"{info}/{n}": d for n, d in _dist_info_files().items()})
        for path, data in files.items():
            z.writestr(path, data)
            records.append(_record_line(path, data))
        records.append(f"{info}/RECORD,,")
        z.writestr(f"{info}/RECORD", "\n".join(records) + "\n")
    return wheel


def build_sdist(sdist_directory: str, config_settings: Optional[dict] = None) -> str:
    base = f"{NAME}-{VERSION}"
    with tarfile.open(os.path.join(sdist_directory, base + ".tar.gz"), "w:gz") as t:
        for path in _sources() + ["pyproject.toml", "README.md", "_build/c4_build.py"]:
            t.add(os.path.join(ROOT, path), arcname=f"{base}/{path}")
        pkg_info = os.path.join(sdist_directory, "PKG-INFO.tmp")
        with open(pkg_info, "w", encoding="utf-8") as f:
            f.write(_metadata())
        t.add(pkg_info, arcname=f"{base}/PKG-INFO")
        os.remove(pkg_info)
    return base + ".tar.gz"
